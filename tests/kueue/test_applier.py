"""Applier passes on the in-memory twin: changed only, rate limit, dry run, refusals."""

from __future__ import annotations

import time

import pytest

from gpuhint.kueue.applier import Applier, TokenBucket
from gpuhint.kueue.hints import MemoryHints
from gpuhint.kueue.memory import InMemoryKueue
from gpuhint.kueue.policy import ClassLadder
from gpuhint.wire.contract import PriorityHint


def _hint(job_id: str, service: float, cluster: str = "c") -> PriorityHint:
    return PriorityHint(job_id=job_id, cluster=cluster, num_gpus=1, submit_time=0,
                        predicted_duration_s=service, priority=service, model="m",
                        model_version="1", created_at=time.time())  # fmt: skip


def _cluster(n: int) -> InMemoryKueue:
    k = InMemoryKueue()
    for i in range(n):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    return k


def test_second_pass_patches_nothing_and_a_hint_change_patches_one() -> None:
    k = _cluster(20)
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 100.0 * 2**i) for i in range(20)})
    hints.hints["other"] = _hint("other", 1.0, cluster="elsewhere")
    a = Applier(k, hints, "c", ClassLadder(), rate=0, workers=3)
    assert a.ensure_classes() and not a.ensure_classes()  # created once
    r1 = a.run_pass()
    assert (r1.relabelled, r1.hints, r1.pending) == (20, 20, 20)
    assert a.run_pass().relabelled == 0 and k.patches == 20
    hints.hints["id19"] = _hint("id19", 1.0)  # the biggest becomes the smallest
    r3 = a.run_pass()
    assert r3.relabelled == 1 and k.jobs["ns/j19"].job_class == "gpuhint-09"
    assert k.jobs["ns/j19"].view.priority == 9  # the twin copies the class value, like Kueue


def test_dry_run_plans_without_patching() -> None:
    k = _cluster(3)
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 60.0) for i in range(3)})
    a = Applier(k, hints, "c", dry_run=True)
    assert a.ensure_classes() and k.classes == {}
    r = a.run_pass()
    assert r.relabelled == 0 and k.patches == 0
    assert [(p["job"], p["to"]) for p in r.planned] == [(f"j{i}", "gpuhint-09") for i in range(3)]


def test_admitted_between_cache_and_patch_is_refused_not_touched() -> None:
    class Racy(InMemoryKueue):
        def views(self):  # type: ignore[no-untyped-def]
            out = super().views()
            self.admit("ns", "j0")  # admitted right after the cache was read
            return out

    k = Racy()
    k.add_job("ns", "j0", job_id="id0")
    r = Applier(k, MemoryHints({"id0": _hint("id0", 60.0)}), "c", rate=0).run_pass()
    assert (r.relabelled, r.refused) == (0, 1) and k.jobs["ns/j0"].job_class is None


def test_errors_are_counted_and_the_pass_goes_on() -> None:
    class Flaky(InMemoryKueue):
        def relabel(
            self, namespace: str, job: str, class_name: str, service_s: float | None
        ) -> bool:
            if job == "j1":
                raise RuntimeError("HTTP 500")
            return super().relabel(namespace, job, class_name, service_s)

    k = Flaky()
    for i in range(3):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 60.0) for i in range(3)})
    r = Applier(k, hints, "c", rate=0, workers=1).run_pass()
    assert (r.relabelled, r.errors) == (2, 1)


def test_token_bucket_spaces_patches_at_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    b = TokenBucket(rate=10, burst=5, clock=lambda: now[0], sleep=sleep)
    for _ in range(25):
        b.take()
    assert abs(now[0] - 2.0) < 1e-6  # 5 at once, then 20 at 10/s
    assert abs(b.waited_s - 2.0) < 1e-6
    unlimited = TokenBucket(rate=0, burst=1, clock=lambda: 0.0, sleep=sleep)
    for _ in range(100):
        unlimited.take()
    assert len(slept) == 20


def test_worker_down_and_redis_down(caplog: pytest.LogCaptureFixture) -> None:
    k = _cluster(3)  # id0..id2 hinted, id3 and id4 (new) not
    k.add_job("ns", "j3", job_id="id3")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 100.0 * 50**i) for i in range(3)})
    now = [time.time()]
    a = Applier(
        k,
        hints,
        "c",
        ClassLadder(),
        rate=0,
        stale_after_s=3600,
        fade_s=0,
        hint_errors=(ConnectionError,),
        wall=lambda: now[0],
    )
    a.ensure_classes()
    r = a.run_pass()
    classes = {n: j.job_class for n, j in k.jobs.items()}
    median = classes["ns/j1"]
    assert classes["ns/j3"] == median and r.unhinted == 1 and r.neutral_set == 1
    assert r.neutral_class == median and r.hints_fresh
    # Redis down: the hints read last are used; a new Workload still gets the neutral class
    hints.down = True
    k.add_job("ns", "j4", job_id="id4")
    r = a.run_pass()
    assert r.hints_from == "cache" and k.jobs["ns/j4"].job_class == median
    assert k.jobs["ns/j0"].job_class == classes["ns/j0"]  # nothing reset
    a.run_pass()
    hints.down = False
    # no sign of life for over an hour: every waiting Workload in the neutral class
    now[0] += 7200
    r = a.run_pass()
    assert not r.hints_fresh and {j.job_class for j in k.jobs.values()} == {median}
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert sum("cannot read hints" in w for w in warnings) == 1
    assert sum("no fresh hint" in w for w in warnings) == 1
    # Redis down before any read: the pass fails, nothing is patched
    down = MemoryHints()
    down.down = True
    patches = k.patches
    with pytest.raises(ConnectionError):
        Applier(k, down, "c", hint_errors=(ConnectionError,)).run_pass()
    assert k.patches == patches


def test_finished_jobs_of_a_preempting_queue_do_not_hold_its_waiting_ones_down() -> None:
    from gpuhint.kueue.policy import QueuePolicy

    k = InMemoryKueue([QueuePolicy("cq", within_cluster_queue="LowerPriority")])
    k.add_job("ns", "done", job_id="d", priority=0)
    k.finish("ns", "done")  # finished long ago at Kueue's default priority
    k.add_job("ns", "new", job_id="n")
    a = Applier(k, MemoryHints({"n": _hint("n", 60.0)}), "c", rate=0)
    a.ensure_classes()
    r = a.run_pass()
    assert r.relabelled == 1 and k.jobs["ns/new"].job_class == "gpuhint-09"
    k.add_job("ns", "run", job_id="r", priority=0, admitted=True)  # a running one does
    k.add_job("ns", "new2", job_id="n2")
    a.hints.hints["n2"] = _hint("n2", 60.0)  # type: ignore[attr-defined]
    assert a.run_pass().skipped.get("preemption-guard") == 1


def test_relabels_refused_by_rbac_are_one_error_not_a_warning_per_job_per_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gpuhint.kueue.errors import KubeError

    class Forbidden(InMemoryKueue):
        def relabel(
            self, namespace: str, job: str, class_name: str, service_s: float | None
        ) -> bool:
            raise KubeError(403, f'jobs.batch "{job}" is forbidden')

    k = Forbidden()
    for i in range(5):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 60.0) for i in range(5)})
    a = Applier(k, hints, "c", rate=0, workers=2)
    with caplog.at_level("DEBUG", logger="gpuhint.kueue"):
        reports = [a.run_pass() for _ in range(3)]
    assert [r.errors for r in reports] == [5, 5, 5]  # still counted (metrics) every pass
    loud = [r for r in caplog.records if r.levelno >= 30]
    assert len(loud) == 1 and "grant patch" in loud[0].getMessage()


@pytest.mark.parametrize("workers", [1, 4])
def test_the_api_server_gone_mid_pass_ends_the_pass_as_an_outage(
    workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A patch with no answer (HTTP status 0: connection refused, timed out) means the
    API server is down, not that one Job is odd: the pass stops patching and fails as an
    outage (the daemon logs it once, records it and retries), not one warning (and, when
    it is unreachable, a 30 s timeout) per Job, every pass, while it reports success."""
    from gpuhint.kueue.errors import KubeError

    class Gone(InMemoryKueue):
        tried = 0

        def relabel(
            self, namespace: str, job: str, class_name: str, service_s: float | None
        ) -> bool:
            Gone.tried += 1
            raise KubeError(0, f"PATCH jobs/{job}: Connection refused")

    k = Gone()
    for i in range(40):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}", 60.0 * (i + 1)) for i in range(40)})
    a = Applier(k, hints, "c", rate=0, workers=workers)
    with caplog.at_level("WARNING", logger="gpuhint.kueue"), pytest.raises(KubeError):
        a.run_pass()
    assert Gone.tried <= workers and not caplog.records
