"""The job-aware CES engine online (gpuhint.cores.ces_jobs) against the offline policy.

Equivalence: a trace runs in the power simulator under ``JobAware``; its job events
(submitted, started on its nodes, finished) go through the in-process pipeline (hint core
-> forwards -> the CES side with ``policy="jobs"``), and the online engine must take the
same decisions at the same times: the same nodes powered down, the same nodes woken.
The QSSF prediction travels in the message path (the hint is forwarded with the submit):
the stub model predicts what the job's name says, and the simulator gets those values.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from gpuhint.cores.ces_jobs import JobsCesConfig, JobsCesEngine
from gpuhint.cores.pipeline.cluster_load import make_processor
from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.evaluation.ces_jobs import cluster_nodes
from gpuhint.lab.traces.readers import read_trace
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus, PowerAction, PriorityHint
from models.base import DurationPrediction
from models.power_jobs import JobAwareConfig
from models.simulator import SimJob
from models.simulator.power import OFF, PowerModel, simulate_power
from models.simulator.power_policies import JobAware

DATA = Path(__file__).resolve().parent.parent / "data"
Decision = tuple[float, tuple[int, ...], tuple[int, ...]]


class NameModel:
    """Predicts the duration written in the job's name (a float), learns nothing."""

    name = "name"
    version = "1"

    def _p(self, job: JobEvent) -> DurationPrediction:
        d = float(job.name or 3600.0)
        return DurationPrediction(d, 0.5, d / 2, d * 2)

    def predict(self, job: JobEvent) -> DurationPrediction:
        return self._p(job)

    def predict_one(self, job: JobEvent) -> DurationPrediction:
        return self._p(job)

    def learn(self, job: JobEvent, duration_s: float) -> None:
        return None

    def learn_one(self, job: JobEvent, duration_s: float) -> None:
        return None

    def expected_one(self, job: JobEvent, now: float | None = None) -> float:
        return self._p(job).expected_s

    def observe_start(self, job: JobEvent) -> None:
        return None

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        return ()


class Recording(JobAware):
    """``JobAware`` that keeps its decisions (time, nodes woken, nodes powered down)."""

    def __init__(self, cfg: JobAwareConfig) -> None:
        super().__init__(cfg)
        self.decisions: list[Decision] = []

    def step(self, t: float) -> None:
        sim = self.sim
        off = [n for n in range(sim.num_nodes) if sim.state[n] == OFF]
        downs = sim.res.power_downs
        before = list(sim.idle)
        super().step(t)
        woke = tuple(sorted(n for n in off if sim.state[n] != OFF))
        down = tuple(n for n in before if n not in sim.idle and sim.state[n] == OFF)
        assert len(down) == sim.res.power_downs - downs
        if woke or down:
            self.decisions.append((t, woke, down))


def _name(i: int) -> str:
    return f"n{i:03d}"


def _trace(path: Path, seed: int) -> tuple[list[SimJob], list[float]]:
    rng = random.Random(seed)
    jobs = [j for j in read_trace(path).jobs if j.num_gpus > 0]
    sim = [SimJob(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in jobs]
    # predictions off by a factor 1/3 .. 3, rounded so they survive JSON exactly
    pred = [float(round(j.duration * math.exp(rng.uniform(-1.1, 1.1)))) for j in jobs]
    return sim, pred


def _events(jobs: list[SimJob], pred: list[float], log: list) -> list[JobEvent]:  # type: ignore[type-arg]
    """The simulator's run as job events, in the order it applied them at each time."""
    rows: list[tuple[float, int, int, JobEvent]] = []
    for i, j in enumerate(jobs):
        ev = JobEvent(
            phase="submitted",
            job_id=j.job_id,
            num_gpus=j.gpus,
            time=j.submit,
            submit_time=j.submit,
            name=repr(pred[i]),
        )
        rows.append((j.submit, 1, i, ev))
    for k, (kind, t, i, nodes, start) in enumerate(log):
        j = jobs[i]
        common = {
            "job_id": j.job_id,
            "num_gpus": j.gpus,
            "time": t,
            "submit_time": j.submit,
            "nodes": tuple(_name(n) for n in nodes),
            "name": repr(pred[i]),
        }
        if kind == "start":  # at allocation; when it runs (after a boot) the engine knows
            rows.append((t, 2, k, JobEvent(phase="started", **common)))  # type: ignore[arg-type]
        else:
            ev = JobEvent(
                phase="finished",
                state="COMPLETED",
                start_time=start,
                duration_s=j.duration,
                **common,  # type: ignore[arg-type]
            )
            rows.append((t, 0, k, ev))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [r[3] for r in rows]


def _online(
    jobs: list[SimJob],
    pred: list[float],
    log: list,
    nodes: int,
    cfg: JobAwareConfig,
    pm: PowerModel,
) -> tuple[list[Decision], InProcessPipeline]:  # type: ignore[type-arg]
    t0 = min(j.submit for j in jobs)
    jcfg = JobsCesConfig(cfg, pm, keep_decisions=10**6)

    def ces(store: InMemoryStore):  # type: ignore[no-untyped-def]
        proc = make_processor(store, policy="jobs", jobs_config=jcfg)
        for n in range(nodes):  # every node reports once, at the start
            proc.on_message(NodeStatus(node=_name(n), time=t0, num_gpus=8))
        return proc

    p = InProcessPipeline(NameModel, partitions=1, batch_max=500, ces=ces)
    p.publish(_events(jobs, pred, log))
    p.run(workers=1)
    assert not p.dead_letters
    (proc,) = p.ces
    assert proc.jobs is not None
    got = proc.jobs.flush("default")
    idx = {_name(n): n for n in range(nodes)}
    return [(t, tuple(sorted(idx[n] for n in w)), tuple(idx[n] for n in d)) for t, w, d in got], p


CASES = [
    ("itp_cluster01_400.csv", JobAwareConfig()),
    ("itp_cluster01_400.csv", JobAwareConfig(quantile=0.5, max_cycles_per_day=2, warmup_s=0)),
    ("venus_qssf_300.csv", JobAwareConfig(quantile=0.9, min_samples=30)),
]


@pytest.mark.parametrize(("trace", "cfg"), CASES)
def test_online_engine_decides_as_the_offline_policy(trace: str, cfg: JobAwareConfig) -> None:
    jobs, pred = _trace(DATA / trace, 7)
    pm = PowerModel(boot_s=300.0)
    nodes = cluster_nodes(jobs, 0.5)
    rec = Recording(cfg)
    res = simulate_power(jobs, nodes, rec, power=pm, predicted=pred, record=True)
    assert res.log is not None
    assert res.power_downs >= 10 and res.wakes >= 1  # the case exercises both
    got, p = _online(jobs, pred, res.log, nodes, cfg, pm)
    first = next(
        (k for k, (a, b) in enumerate(zip(got, rec.decisions, strict=False)) if a != b), None
    )
    assert first is None, (first, got[first], rec.decisions[first])  # (time, woken, down)
    assert len(got) == len(rec.decisions) and len(got) >= 10
    adv = p.redis.get_advisory("default")
    assert adv is not None and adv.off_nodes is not None
    assert adv.active_nodes == nodes - len(adv.off_nodes)


def test_other_predictions_change_the_decisions() -> None:
    """The check can fail: online fed other predictions than the simulator's differs."""
    jobs, pred = _trace(DATA / "itp_cluster01_400.csv", 7)
    cfg, pm = JobAwareConfig(quantile=0.5, warmup_s=0), PowerModel(boot_s=300.0)
    nodes = cluster_nodes(jobs, 0.5)
    rec = Recording(cfg)
    res = simulate_power(jobs, nodes, rec, power=pm, predicted=pred, record=True)
    other = [p * 3 for p in pred]
    got, _ = _online(jobs, other, res.log or [], nodes, cfg, pm)
    assert got != rec.decisions


def _ev(phase: str, job: str, t: float, nodes: tuple[str, ...] = (), gpus: int = 8) -> JobEvent:
    return JobEvent(
        phase=phase,  # type: ignore[arg-type]
        job_id=job,
        num_gpus=gpus,
        time=t,
        submit_time=0.0,
        nodes=nodes,
    )


def test_advice_not_followed_is_taken_back_and_its_cycle_forgotten() -> None:
    store = InMemoryStore()
    cfg = JobsCesConfig(JobAwareConfig(warmup_s=0, max_cycles_per_day=1), keep_decisions=99)
    eng = JobsCesEngine(store, cfg)
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="a", time=100, num_gpus=8))
    (first,) = eng.flush("default")[:1]
    assert set(first[2]) == {"a", "b"}
    store.flush()
    adv = store.get_advisory("default")
    assert adv is not None and adv.action is PowerAction.POWER_DOWN
    assert adv.off_nodes == ("a", "b") and adv.active_nodes == 0
    assert store.get_advisory("default", "a") is not None
    # b went off; a still reports on after the confirm window: it stayed on
    eng.on_message(NodeStatus(node="b", time=150, num_gpus=8, powered_on=False))
    eng.on_message(NodeStatus(node="a", time=500, num_gpus=8))
    c = eng.cluster("default")
    assert c.state[c.index["a"]] != OFF and c.cycles[c.index["a"]] == 0
    # ... so the limit of one cycle a day does not stop a second power-down of a
    eng.on_message(NodeStatus(node="a", time=560, num_gpus=8))
    eng.flush("default")
    assert c.state[c.index["a"]] == OFF


def test_a_job_on_an_off_node_boots_it_and_queued_jobs_wake_nodes() -> None:
    cfg = JobsCesConfig(JobAwareConfig(warmup_s=0), keep_decisions=99)
    eng = JobsCesEngine(None, cfg)
    for n in ("a", "b", "c"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="a", time=60, num_gpus=8))
    c = eng.cluster("default")
    assert all(s == OFF for s in c.state)  # no demand seen: all three off
    eng.on_message(_ev("submitted", "j", 100, gpus=8))
    eng.on_message(_ev("started", "j", 100, ("a",)))
    assert c.state[c.index["a"]] != OFF and c.n_boot == 1
    eng.on_message(_ev("submitted", "big", 120, gpus=24))  # needs 3 nodes: a head
    eng.on_message(NodeStatus(node="c", time=121, num_gpus=8, powered_on=False))
    woke = [d for d in eng.flush("default") if d[1]]
    assert woke == [(120.0, ("b", "c"), ())]  # at once; c's off report: not yet applied
    # still off a boot + the confirm window after its wake: the wake failed, wake again
    eng.on_message(NodeStatus(node="c", time=120 + 300 + 301, num_gpus=8, powered_on=False))
    assert c.state[c.index["c"]] == OFF
    woke = [d for d in eng.flush("default") if d[1]]
    assert woke[-1] == (721.0, ("c",), ())
    # the metrics' view: every decision and node counted, the states as the engine has them
    made = eng.flush("default")
    assert eng.stats.decisions == len(made)
    assert eng.stats.nodes_woken == sum(len(d[1]) for d in made)
    assert eng.stats.nodes_powered_down == sum(len(d[2]) for d in made) == 3
    counts = c.node_counts()
    assert sum(counts.values()) == 3 and counts["booting"] == c.n_boot >= 1
    assert counts["off"] == sum(1 for s in c.state if s == OFF)


@pytest.mark.parametrize("max_record_bytes", [512 * 1024, 2048])
def test_a_restart_from_the_checkpoint_decides_as_an_uninterrupted_run(
    max_record_bytes: int,
) -> None:
    """Also with checkpoints longer than a record (2 kB here; a queue of 25,000 jobs
    once made one of 1 MB, which Kafka refused and the worker crashed): they are
    written in parts, each at most ``max_record_bytes``, and restored joined."""
    jobs, pred = _trace(DATA / "itp_cluster01_400.csv", 3)
    cfg, pm = JobAwareConfig(quantile=0.9, warmup_s=0), PowerModel(boot_s=300.0)
    nodes = cluster_nodes(jobs, 0.5)
    res = simulate_power(jobs, nodes, JobAware(cfg), power=pm, predicted=pred, record=True)
    events = _events(jobs, pred, res.log or [])
    hints = {
        j.job_id: PriorityHint(
            job_id=j.job_id,
            num_gpus=j.gpus,
            submit_time=j.submit,
            predicted_duration_s=p,
            priority=0,
            model="m",
            model_version="1",
            created_at=j.submit,
        )
        for j, p in zip(jobs, pred, strict=True)
    }
    jcfg = JobsCesConfig(cfg, pm, keep_decisions=10**6)
    t0 = min(j.submit for j in jobs)

    # the cluster's messages; a busy node "zz" reports between events (only its clock moves)
    msgs: list[JobEvent | NodeStatus | PriorityHint] = [
        NodeStatus(node=n, time=t0, num_gpus=8, busy_gpus=8 * (n == "zz"))
        for n in [*map(_name, range(nodes)), "zz"]
    ]
    quiet: list[int] = []
    for k, e in enumerate(events):
        msgs.append(e)
        if e.phase is JobPhase.SUBMITTED:
            msgs.append(hints[e.job_id])
        if k % 7 == 6 and k + 1 < len(events):
            t = (e.time + events[k + 1].time) / 2
            msgs.append(NodeStatus(node="zz", time=t, num_gpus=8, busy_gpus=8))
            if t - e.time > 3 * cfg.tick_s:
                quiet.append(len(msgs))  # ticks fell due before it: a cut right after it

    def fresh(table: dict[str, bytes]):  # type: ignore[no-untyped-def]
        return make_processor(
            None,
            policy="jobs",
            jobs_config=jcfg,
            checkpoints=table,
            max_record_bytes=max_record_bytes,
        )

    whole = fresh({})
    for m in msgs:
        whole.on_message(m)
    assert whole.jobs is not None
    want = whole.jobs.flush("default")
    assert len(want) >= 10
    # cut right after clock-only messages (the cached checkpoint must still be current)
    for cut in (quiet[len(quiet) // 3], quiet[len(quiet) // 2], quiet[2 * len(quiet) // 3]):
        table: dict[str, bytes] = {}
        first = fresh(table)
        for m in msgs[:cut]:
            first.on_message(m)
            first.checkpoint_dirty()  # every message, as a worker with one-message batches
        assert max(map(len, table.values())) <= max_record_bytes
        assert (len(table) > 1) == (max_record_bytes < 4096), sorted(table)  # parts
        second = fresh(table)  # a new worker: restores the cluster at its first message
        second._restore("default")
        assert first.jobs is not None and second.jobs is not None
        was, now = first.jobs.clusters["default"], second.jobs.clusters["default"]
        assert now.core is not None and was.core is not None
        assert (now.t_last, now.core.next_t, now.idle) == (was.t_last, was.core.next_t, was.idle)
        for m in msgs[cut:]:
            second.on_message(m)
        assert second.jobs is not None and second.jobs.flush("default") == want, cut


def test_a_job_waiting_for_days_keeps_the_queue_small() -> None:
    eng = JobsCesEngine(None, JobsCesConfig(JobAwareConfig(warmup_s=0)))
    eng.on_message(NodeStatus(node="a", time=0, num_gpus=8))
    eng.on_message(_ev("submitted", "huge", 1, gpus=64))
    for k in range(2000):  # small jobs come and go behind it
        t = 10.0 + k
        eng.on_message(_ev("submitted", f"s{k}", t, gpus=1))
        eng.on_message(_ev("started", f"s{k}", t, ("a",), gpus=1))
        eng.on_message(_ev("finished", f"s{k}", t + 0.5, ("a",), gpus=1))
    c = eng.cluster("default")
    assert c.head_gpus() == 64 and len(c.order) <= 2 * len(c.queue) + 65
