"""The starvation bound (models/wait_bound.py) and self-consistent hints, in the hint core."""

from __future__ import annotations

import pickle

from gpuhint.cores.qssf import HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase, PriorityHint
from models.base import DurationPrediction
from models.fifo_guard import FifoGuard
from models.simulator import SimJob, simulate_vc
from models.wait_bound import WaitBound


class _Truth:
    """A model that knows every job's duration (expected = true): pure QSSF."""

    name = "truth"
    version = "1"

    def __init__(self, truth: dict[str, float]) -> None:
        self.truth = truth

    def predict(self, job: JobEvent) -> DurationPrediction:
        return self.predict_one(job)

    def predict_one(self, job: JobEvent) -> DurationPrediction:
        d = self.truth[job.job_id]
        return DurationPrediction(d, 0.5, d / 2, d * 2, (("truth", d),))

    def learn(self, job: JobEvent, duration_s: float) -> None:
        return None

    def learn_one(self, job: JobEvent, duration_s: float) -> None:
        return None

    def expected_one(self, job: JobEvent, now: float | None = None) -> float:
        return self.truth[job.job_id]

    def observe_start(self, job: JobEvent) -> None:
        return None

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        return ()


class _Ranker:
    """Drives an engine from the simulator (as ``gpuhint evaluate qssf`` does)."""

    def __init__(self, engine: HintEngine, jobs: list[SimJob]) -> None:
        self.engine, self.jobs = engine, jobs
        self.held: list[tuple[int, float]] = []
        self.overdue: list[PriorityHint] = []

    def _ev(self, i: int, phase: str, t: float, **kw: object) -> JobEvent:
        j = self.jobs[i]
        return JobEvent(
            phase=phase,  # type: ignore[arg-type]
            job_id=j.job_id,
            num_gpus=j.gpus,
            time=t,
            submit_time=j.submit,
            **kw,  # type: ignore[arg-type]
        )

    def _hold(self) -> None:
        for h in self.engine.updates:
            self.held.append((int(h.job_id), h.priority))
            if h.reasons[0].feature == "wait_bound:overdue":
                self.overdue.append(h)

    def submit(self, i: int, t: float) -> float:
        hint = self.engine.on_job_event(self._ev(i, "submitted", t))
        assert hint is not None
        self._hold()
        return hint.priority

    def start(self, i: int, t: float) -> None:
        self.engine.on_job_event(self._ev(i, "started", t, start_time=t))
        self._hold()

    def finish(self, i: int, t: float) -> list[tuple[int, float]]:
        d = self.jobs[i].duration
        self.engine.on_job_event(self._ev(i, "finished", t, start_time=t - d, duration_s=d))
        self._hold()
        out, self.held = self.held, []
        return out


def _starving_trace() -> list[SimJob]:
    """One 16-GPU job among a steady stream of 8-GPU ones on 2 nodes (load 0.9): under
    QSSF the big one waits until the stream stops, under FIFO it waits its turn."""
    jobs = [SimJob("0", 0.0, 500.0, 8), SimJob("1", 1.0, 1000.0, 16)]
    jobs += [SimJob(str(k), 10.0 + 270.0 * (k - 2), 480.0, 8) for k in range(2, 400)]
    return jobs


def _run(jobs: list[SimJob], bound: float) -> tuple[list[float], _Ranker]:
    truth = {j.job_id: j.duration for j in jobs}
    engine = HintEngine(lambda: _Truth(truth), InMemoryStore(), clock=lambda: 0.0, wait_bound=bound)
    # a guard that replays FIFO early and often (a straggler is dropped 64 submits on)
    engine.states["default/default"] = VcState(
        model=_Truth(truth),
        guard=FifoGuard(window=16, every=8, min_jobs=16),
        bound=WaitBound(bound),
    )
    ranker = _Ranker(engine, jobs)
    out = simulate_vc(jobs, 2, "qssf", ranker=ranker)
    return [o.start - j.submit for o, j in zip(out, jobs, strict=True)], ranker


def test_the_bound_serves_a_starved_job_near_its_fifo_time() -> None:
    jobs = _starving_trace()
    fifo = [o.start - j.submit for o, j in zip(simulate_vc(jobs, 2, "fifo"), jobs, strict=True)]
    free, _ = _run(jobs, 0.0)
    bounded, ranker = _run(jobs, 1.0)
    assert free[1] > 10 * max(fifo)  # the big job starves without the bound
    assert bounded[1] < free[1] / 4
    # the VC has a limit once the FIFO shadow has the big job (dropped 64 submits on)
    assert bounded[1] <= 96 * 270.0
    st = ranker.engine.state("default", "default")
    assert st.bound.scale == st.guard.shadow.max_wait > 0
    (h,) = (h for h in ranker.overdue if h.job_id == "1")
    assert h.reasons[0].feature == "wait_bound:overdue"
    assert h.reasons[0].contribution > 0  # the wait limit, in seconds
    assert 0 < h.priority < 1e-3  # the front: below every job the model ranks
    assert h.expected_duration_s == 1000.0  # the estimate is still there
    assert ranker.engine.stats.overdue >= 1
    assert sum(bounded) <= sum(free)  # here the others gain: nothing waits behind it


def _warm(engine: HintEngine, scale: float = 10.0) -> None:
    """As if arrival order had made a job of the VC wait ``scale`` s."""
    engine.state("default", "default").bound.scale = scale


def _three_waiting() -> tuple[InMemoryStore, HintEngine]:
    """A warmed VC with limit 20 s and jobs a (100 s), b (10 s), c (1 s) waiting from
    100, 101, 102; d, e, f are 1 s jobs."""
    store = InMemoryStore()
    truth = {"a": 100.0, "b": 10.0, "c": 1.0, "d": 1.0, "e": 1.0, "f": 1.0}
    engine = HintEngine(lambda: _Truth(truth), store, wait_bound=2.0)
    _warm(engine)
    assert engine.state("default", "default").bound.limit == 20.0
    for jid, t in (("a", 100.0), ("b", 101.0), ("c", 102.0)):
        engine.on_job_event(
            JobEvent(phase="submitted", job_id=jid, num_gpus=1, time=t, submit_time=t)
        )
    return store, engine


def test_overdue_jobs_go_first_one_at_a_time_in_arrival_order() -> None:
    store, engine = _three_waiting()
    assert engine.stats.overdue == 0
    d = JobEvent(phase="submitted", job_id="d", num_gpus=1, time=121.5, submit_time=121.5)
    engine.on_job_event(d)
    assert [h.job_id for h in engine.updates] == ["a"]  # the oldest of a and b (over 20 s)
    store.flush()
    assert [jid for jid, _ in store.queue("default", "default")] == ["a", "c", "d", "b"]
    hint = store.get_hint("default", "a")
    assert hint is not None and hint.reasons[0].feature == "wait_bound:overdue"
    assert hint.reasons[0].contribution == 20.0  # the limit it passed, in seconds
    assert hint.expected_duration_s == 100.0  # the estimate is still there
    assert 0 < hint.priority < 1e-3
    engine.on_job_event(d.model_copy(update={"job_id": "e", "time": 130.0}))
    assert engine.updates == []  # "a" still at the front: nobody else moves
    engine.on_job_event(
        JobEvent(phase="started", job_id="a", num_gpus=1, time=131, submit_time=100)
    )
    assert [h.job_id for h in engine.updates] == ["b"]  # the next overdue
    assert engine.stats.overdue == 2


def test_off_means_no_overdue_and_state_pickles() -> None:
    jobs = _starving_trace()
    _, ranker = _run(jobs, 0.0)
    assert ranker.engine.stats.overdue == 0 and not ranker.overdue
    st = ranker.engine.state("default", "default")
    clone = pickle.loads(pickle.dumps(st))
    assert isinstance(clone.bound, WaitBound) and clone.bound.factor == 0.0
    old = VcState.__new__(VcState)  # a state pickled before the bound existed
    old.__setstate__({"model": st.model})
    assert isinstance(old.bound, WaitBound) and old.submit_point == {}


def test_the_settings_default_is_the_cores() -> None:
    from gpuhint.wire.config import Settings
    from models.wait_bound import DEFAULT_WAIT_BOUND

    assert Settings.model_fields["qssf_wait_bound"].default == DEFAULT_WAIT_BOUND
    assert HintEngine(lambda: _Truth({}), InMemoryStore()).wait_bound == DEFAULT_WAIT_BOUND


def _waiting_under(factor: float, truth: dict[str, float]) -> VcState:
    """A VC state saved with two jobs waiting under ``factor`` (0: the bound off)."""
    engine = HintEngine(lambda: _Truth(truth), InMemoryStore(), wait_bound=factor)
    for jid, t in (("old", 100.0), ("new", 101.0)):
        engine.on_job_event(
            JobEvent(phase=JobPhase.SUBMITTED, job_id=jid, num_gpus=1, time=t, submit_time=t)
        )
    return pickle.loads(pickle.dumps(engine.state("default", "default")))


def _restarted(st: VcState, truth: dict[str, float], factor: float) -> HintEngine:
    engine = HintEngine(lambda: _Truth(truth), InMemoryStore(), wait_bound=factor)
    engine.states["default/default"] = st
    _warm(engine)
    return engine


def test_jobs_waiting_when_the_bound_is_turned_on_are_bounded_too() -> None:
    """A restart with the bound on (it was off, or the state predates it): the jobs that
    were already waiting, the longest waits of all, become overdue like any other."""
    truth = {"old": 100.0, "new": 1.0, "x": 1.0}
    off = _waiting_under(0.0, truth)
    predates = _waiting_under(2.0, truth)
    legacy = VcState.__new__(VcState)  # pickled before the bound existed
    legacy.__setstate__({k: v for k, v in predates.__dict__.items() if k != "bound"})
    for st in (off, legacy):
        engine = _restarted(st, truth, 2.0)
        x = JobEvent(phase=JobPhase.SUBMITTED, job_id="x", num_gpus=1, time=200.0, submit_time=200)
        engine.on_job_event(x)
        assert [h.job_id for h in engine.updates] == ["old"]
        assert engine.updates[0].reasons[0].feature == "wait_bound:overdue"
        started = x.model_copy(update={"phase": JobPhase.STARTED, "job_id": "old", "time": 201.0})
        engine.on_job_event(started.model_copy(update={"submit_time": 100.0}))
        assert [h.job_id for h in engine.updates] == ["new"]  # then the next, once


def test_turning_the_bound_off_sends_the_job_at_the_front_back_to_its_rank() -> None:
    """A restart with the bound off (0): no hint stays overridden by it."""
    truth = {"old": 100.0, "new": 1.0, "x": 1.0, "y": 1.0}
    on = _restarted(_waiting_under(2.0, truth), truth, 2.0)
    x = JobEvent(phase=JobPhase.SUBMITTED, job_id="x", num_gpus=1, time=200.0, submit_time=200)
    on.on_job_event(x)
    assert [h.job_id for h in on.updates] == ["old"]  # at the front
    store = InMemoryStore()
    off = HintEngine(lambda: _Truth(truth), store, wait_bound=0.0)
    off.states["default/default"] = pickle.loads(pickle.dumps(on.state("default", "default")))
    off.rebuild()
    off.on_job_event(x.model_copy(update={"job_id": "y", "time": 300.0, "submit_time": 300.0}))
    (h,) = off.updates
    assert h.job_id == "old" and h.priority == 100.0 == h.expected_duration_s
    assert h.reasons[0].feature == "updated:expected_s"
    store.flush()
    assert [j for j, _ in store.queue("default", "default")] == ["new", "x", "y", "old"]
    assert not off.state("default", "default").bound.overdue


def test_a_job_stuck_at_the_front_lets_the_next_overdue_job_through_after_its_patience() -> None:
    """A job at the front that does not start (held by its user, or one whose end was
    never announced) must not keep the bound off for its VC: after one more limit at
    the front, and at least the default factor's limit (16 x 10 s here, factor 2), the
    next overdue job is promoted beside it (it keeps its place first)."""
    store, engine = _three_waiting()
    d = JobEvent(phase="submitted", job_id="d", num_gpus=1, time=121.5, submit_time=121.5)
    engine.on_job_event(d)
    assert [h.job_id for h in engine.updates] == ["a"]  # promoted at 121.5
    engine.on_job_event(d.model_copy(update={"job_id": "e", "time": 281.0}))
    assert engine.updates == []  # a at the front for 159.5 s < 160 s: b waits
    engine.on_job_event(d.model_copy(update={"job_id": "f", "time": 282.0}))
    assert [h.job_id for h in engine.updates] == ["b"]  # a stuck 160 s: b goes too
    store.flush()
    assert [jid for jid, _ in store.queue("default", "default")][:2] == ["a", "b"]
    engine.on_job_event(
        JobEvent(phase="started", job_id="b", num_gpus=1, time=290, submit_time=101)
    )
    assert [h.job_id for h in engine.updates] == ["c"]  # a is still stuck: the next goes
    st = engine.state("default", "default")
    assert st.bound.is_overdue("a") and not st.bound.is_overdue("b")
    assert st.bound.due(449.0) == [] and st.bound.due(450.0) == ["d"]  # c is stuck too


def test_a_restored_front_counts_from_its_first_check_and_the_state_stays_five_fields() -> None:
    """The bound's own pickle is the five fields an older worker reads (a rollback loads
    it; the VC's state carries the promotion times beside it), and a job restored at the
    front without its promotion time counts as promoted at its first check."""
    b = WaitBound(factor=2.0)
    b.scale = 10.0
    b.submit("a", 0.0)
    b.submit("b", 1.0)
    assert b.due(25.0) == ["a"]  # b is overdue too, but waits behind a
    state = b.__getstate__()
    assert len(state) == 5  # factor, heap, overdue, scale, submit_of: as before
    restored = pickle.loads(pickle.dumps(b))
    assert restored.is_overdue("a") and restored.due(30.0) == []
    assert restored.due(189.0) == [] and restored.due(190.0) == ["b"]  # 30 + 16 x 10
