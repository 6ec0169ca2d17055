"""Determinism of the whole pipeline in process: workers, crashes, rebalances, outages.

The same per-VC state, offset watermark and per-batch flush/save/commit order as the
Faust worker; the final Redis state (every hint byte for byte, every queue) must not
depend on how many workers ran nor where they died.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"
MODEL = "history_mix"  # the default model: the one whose state used to be per worker


@pytest.fixture(scope="module")
def events() -> list[JobEvent]:
    evs = job_events(read_trace(TRACE).jobs, cluster="philly")
    return evs[: int(len(evs) * 0.8)]  # stop mid-trace so real queues remain


def pipeline(events: list[JobEvent]) -> InProcessPipeline:
    p = InProcessPipeline(MODEL, partitions=4, batch_max=40)
    p.publish(events)
    return p


@pytest.fixture(scope="module")
def reference(events: list[JobEvent]) -> InProcessPipeline:
    p = pipeline(events)
    assert p.run(workers=1) == len(events)
    assert p.queues(), "the reference run must end with queued jobs"
    return p


def same(a: InProcessPipeline, b: InProcessPipeline) -> None:
    assert a.pending_hints() == b.pending_hints()
    assert a.queues() == b.queues()


@pytest.mark.parametrize("workers", [2, 3])
def test_any_number_of_workers_gives_the_same_hints(
    events: list[JobEvent], reference: InProcessPipeline, workers: int
) -> None:
    p = pipeline(events)
    p.run(workers=workers)
    same(p, reference)


@pytest.mark.parametrize("crash", ["after_handle", "after_flush", "after_save"])
@pytest.mark.parametrize("at_batch", [1, 7, 15])
def test_a_crash_anywhere_in_a_batch_changes_nothing(
    events: list[JobEvent], reference: InProcessPipeline, crash: str, at_batch: int
) -> None:
    p = pipeline(events)
    p.run(workers=1, max_batches=at_batch, crash=crash)  # type: ignore[arg-type]
    assert sum(p.committed) < len(events)
    p.run(workers=2)  # the replacement (and a second worker) resume from the commits
    same(p, reference)


def test_redelivery_after_saved_state_is_not_learned_twice(
    events: list[JobEvent], reference: InProcessPipeline
) -> None:
    p = pipeline(events)
    p.run(workers=1, max_batches=10, crash="after_save")
    p.run(workers=1)
    assert p.redelivered == 40  # the whole uncommitted batch came again...
    assert p.learned == reference.learned  # ...and taught the model nothing new
    same(p, reference)


def test_rebalance_mid_replay(events: list[JobEvent], reference: InProcessPipeline) -> None:
    p = pipeline(events)
    p.run(workers=1, max_batches=5)
    p.run(workers=3, max_batches=9)  # partitions move to other workers with their state
    p.run(workers=2)
    same(p, reference)


def test_redis_coming_back_empty_is_rebuilt_from_state(
    events: list[JobEvent], reference: InProcessPipeline
) -> None:
    p = pipeline(events)
    p.run(workers=2, after_batch=lambda n: p.redis.wipe() if n == 12 else None)
    same(p, reference)
    # the fresh Redis at the start, then each worker for its own VCs after the wipe
    assert p.rebuilds == 3
    assert any(c.type == "rebuilt" and c.key == "redis_empty" for c in p.redis.changes)


def test_without_the_watermark_a_crash_would_change_priorities(events: list[JobEvent]) -> None:
    """The test can fail: learning a redelivered finish twice changes later priorities."""
    p = pipeline(events)
    p.run(workers=1, max_batches=10, crash="after_save")
    for k in list(p.table):  # forget the watermark, as a state without one would
        w = p._worker("x", set())
        st = w.states[k]
        st.applied_offset = -1
        st.recent_finished.clear()  # and the finished jobs it remembers
        w.states[k] = st
        w.states.save_dirty()
    p.run(workers=1)
    ref = pipeline(events)
    ref.run(workers=1)
    assert p.pending_hints() != ref.pending_hints()


def _unfinished(events: list[JobEvent]) -> dict[tuple[str, str], dict[str, None]]:
    """Each VC's jobs submitted and not finished after ``events``, in order."""
    from gpuhint.wire.contract import JobPhase

    out: dict[tuple[str, str], dict[str, None]] = {}
    for ev in events:
        jobs = out.setdefault((ev.cluster, ev.vc), {})
        if ev.phase is JobPhase.FINISHED:
            jobs.pop(ev.job_id, None)
        else:
            jobs[ev.job_id] = None
    return out


def _with_rosters(events: list[JobEvent]) -> tuple[InProcessPipeline, set[str]]:
    """Half the events; a roster per VC that leaves every 5th unfinished job out (its
    end "lost": none of its later events is published); a tenth more events; a second
    roster, as of then; the rest."""
    from gpuhint.cores.job_roster import roster_parts
    from gpuhint.wire.contract import encode_message
    from gpuhint.wire.topics import job_key

    cuts = (len(events) // 2, len(events) * 6 // 10)
    lost = {
        j
        for jobs in _unfinished(events[: cuts[0]]).values()
        for k, j in enumerate(jobs)
        if k % 5 == 0
    }
    p = InProcessPipeline(MODEL, partitions=4, batch_max=40)
    for a, b in ((0, cuts[0]), (cuts[0], cuts[1])):
        p.publish(ev for ev in events[a:b] if ev.job_id not in lost or a == 0)
        for (cluster, vc), jobs in _unfinished(events[:b]).items():
            listed = [j for j in jobs if j not in lost]
            for part in roster_parts(cluster, vc, events[b - 1].time, listed):
                p.publish_raw(job_key(cluster, vc), encode_message(part))
    p.publish(ev for ev in events[cuts[1] :] if ev.job_id not in lost)
    return p, lost


@pytest.mark.parametrize("crash", ["after_handle", "after_flush", "after_save"])
def test_rosters_retire_the_same_jobs_whatever_the_crashes_and_workers(
    events: list[JobEvent], crash: str
) -> None:
    ref, lost = _with_rosters(events)
    ref.run(workers=1)
    assert lost and not {j for _, j in ref.redis.hints} & lost  # every lost job retired
    waiting_at_cut = pipeline(events[: len(events) // 2])
    waiting_at_cut.run(workers=1)
    assert {j for _, j in waiting_at_cut.redis.hints} & lost  # some were waiting: can fail
    for at_batch in (10, 18, 21):  # the batches with the second rosters of p2, p0, p3
        p, _ = _with_rosters(events)
        p.run(workers=1, max_batches=at_batch, crash=crash)  # type: ignore[arg-type]
        p.run(workers=2)
        same(p, ref)
