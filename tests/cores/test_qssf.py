from __future__ import annotations

import pickle

from gpuhint.cores.qssf import HintEngine, PendingJob
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase, PriorityHint
from models.base import DurationPrediction
from models.history import HistoryEstimator


def ev(
    phase: str, job: str, t: float, dur: float | None = None, gpus: int = 2, vc: str = "v"
) -> JobEvent:
    return JobEvent(
        phase=phase,
        job_id=job,
        user="u",
        vc=vc,
        num_gpus=gpus,
        time=t,
        submit_time=0,
        duration_s=dur,
    )


def test_hint_lifecycle_and_learning() -> None:
    store = InMemoryStore()
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store, clock=lambda: 7.0)
    hint = engine.on_job_event(ev("submitted", "a", 0))
    assert hint is not None and hint.priority == 2 * 50 and hint.created_at == 7.0
    assert hint.duration_p10_s is not None and hint.duration_p10_s <= hint.duration_p90_s  # type: ignore[operator]
    store.flush()
    assert store.queue("default", "v") == [("a", 100.0)]

    engine.on_job_event(ev("started", "a", 1))
    store.flush()
    assert store.queue("default", "v") == [] and store.get_hint("default", "a") is None

    engine.on_job_event(ev("finished", "a", 11, dur=10))
    s = engine.stats
    assert (s.submitted, s.started, s.finished, s.learned, s.scored) == (1, 1, 1, 1, 1)
    assert s.mae_log is not None and s.mae_log > 0
    assert s.median_abs_pct_error == (50 - 10) / 10
    st = engine.states["default/v"]
    assert st.pending == {} and st.running == {}

    nxt = engine.on_job_event(ev("submitted", "b", 12))
    assert nxt is not None and nxt.predicted_duration_s == 10  # learned from "a"
    assert nxt.reasons[0].feature == "history:user+gpus"


def test_finish_without_a_prediction_still_learns() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    assert engine.stats.learned == 1 and engine.stats.scored == 0


def test_priority_is_gpus_times_expected_duration() -> None:
    from models.base import DurationPrediction

    class Fixed:
        name, version = "fixed", "1"

        def predict(self, job: JobEvent) -> DurationPrediction:
            return DurationPrediction(10.0, 1.0, 5.0, 20.0, expected_s=40.0)

        def learn(self, job: JobEvent, duration_s: float) -> None:
            return None

    hint = HintEngine(Fixed, InMemoryStore()).on_job_event(ev("submitted", "a", 0, gpus=3))
    assert hint is not None
    assert hint.predicted_duration_s == 10.0 and hint.priority == 3 * 40.0


def test_each_vc_has_its_own_model() -> None:
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), InMemoryStore())
    engine.on_job_event(ev("submitted", "a", 0, vc="x"))
    engine.on_job_event(ev("finished", "a", 5, dur=10, vc="x"))
    hx = engine.on_job_event(ev("submitted", "b", 6, vc="x"))
    hy = engine.on_job_event(ev("submitted", "c", 6, vc="y"))
    assert hx is not None and hx.predicted_duration_s == 10
    assert hy is not None and hy.predicted_duration_s == 50  # nothing leaks across VCs
    assert engine.states["default/x"].model is not engine.states["default/y"].model


def _lifecycle() -> list[JobEvent]:
    return [
        ev("submitted", "a", 0),
        ev("submitted", "b", 1),
        ev("started", "a", 2),
        ev("finished", "a", 12, dur=10),
        ev("submitted", "c", 13),
    ]


def test_redelivered_events_change_no_state_and_reemit_current_writes() -> None:
    once = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), InMemoryStore())
    for off, e in enumerate(_lifecycle()):
        once.on_job_event(e, offset=off)
    twice_store = InMemoryStore()
    twice = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), twice_store)
    events = _lifecycle()
    for off, e in enumerate(events):
        twice.on_job_event(e, offset=off)
    for off, e in enumerate(events):  # a crash before the offsets were committed
        twice.on_job_event(e, offset=off)
    a, b = once.states["default/v"], twice.states["default/v"]
    assert b.applied_offset == 4 and twice.stats.redelivered == 5
    assert twice.stats.learned == once.stats.learned == 1  # learned once, not twice
    assert a.model.state == b.model.state  # type: ignore[attr-defined]
    assert {j: p.priority for j, p in a.pending.items()} == {
        j: p.priority for j, p in b.pending.items()
    }
    twice_store.flush()
    # the redelivered submit of "a" (since started) did not resurrect its hint
    # "b" was re-ranked when "a" (same user and GPUs) finished: a hint update; it ties "c"
    assert [j for j, _ in twice_store.queue("default", "v")] == ["b", "c"]


def test_events_without_offsets_are_always_applied() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    engine.on_job_event(ev("finished", "y", 5, dur=30))
    assert engine.stats.learned == 2 and engine.states["default/v"].applied_offset == -1
    engine.on_job_event(ev("finished", "z", 5, dur=30))  # a resend: once per (job, phase)
    assert engine.stats.learned == 2 and engine.stats.duplicates == 1


def test_started_job_is_scored_at_finish_and_rebuild_rewrites_waiting_jobs() -> None:
    store = InMemoryStore()
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store)
    for e in _lifecycle():
        engine.on_job_event(e)
    assert engine.stats.scored == 1
    store.flush()
    empty = InMemoryStore()
    engine.store = empty
    assert engine.rebuild() == 2
    empty.flush()
    assert empty.queue("default", "v") == store.queue("default", "v")


def test_vc_state_pickles_with_its_model() -> None:
    import pickle

    engine = HintEngine(HistoryEstimator, InMemoryStore())
    for off, e in enumerate(_lifecycle()):
        engine.on_job_event(e, offset=off)
    st = pickle.loads(pickle.dumps(engine.states["default/v"]))
    assert st.applied_offset == 4 and set(st.pending) == {"b", "c"}
    probe = ev("submitted", "p", 20)
    assert st.model.predict(probe) == engine.states["default/v"].model.predict(probe)


# -- hint updates and the FIFO guard (QSSF semantics) -----------------------------------


def _sweep_events(n: int, gpus: int = 4) -> list[JobEvent]:
    base = {"cluster": "c", "vc": "v", "user": "alice", "num_gpus": gpus}
    return [
        JobEvent(phase="submitted", job_id=f"s{i}", time=60.0 * i, submit_time=60.0 * i, **base)
        for i in range(n)
    ]


def _phase(ev: JobEvent, phase: str, t: float, **kw: object) -> JobEvent:
    return ev.model_copy(update={"phase": JobPhase(phase), "time": t, "start_time": 1.0, **kw})


def test_a_waiting_jobs_hint_moves_after_its_sibling_finishes() -> None:
    from models.registry import DURATION_MODELS

    store = InMemoryStore()
    engine = HintEngine(DURATION_MODELS["history_mix"], store, clock=lambda: 0.0, wait_bound=0)
    subs = _sweep_events(3)
    for ev in subs:
        engine.on_job_event(ev)
    engine.on_job_event(_phase(subs[0], "started", 1.0))
    store.flush()
    before = dict(store.queue("c", "v"))
    assert set(before) == {"s1", "s2"}
    engine.on_job_event(_phase(subs[0], "finished", 50_001.0, duration_s=50_000.0))
    assert {h.job_id for h in engine.updates} == {"s1", "s2"}
    store.flush()
    after = dict(store.queue("c", "v"))
    assert after["s1"] > before["s1"] and after["s2"] > before["s2"]
    moved = store.get_hint("c", "s1")
    assert moved is not None and moved.priority == after["s1"]
    assert moved.reasons[0].feature == "updated:expected_s"
    assert [c.key for c in store.changes if c.type == "hint_updated"] == ["s1", "s2"]
    assert engine.stats.hints_updated == 2
    # the state moves with its partition: a pickled copy continues identically
    clone = pickle.loads(pickle.dumps(engine.states))
    assert clone.keys() == engine.states.keys()


def test_hint_updates_are_bounded_per_event() -> None:
    from models.registry import DURATION_MODELS

    engine = HintEngine(
        DURATION_MODELS["history_mix"], InMemoryStore(), max_updates=16, wait_bound=0
    )
    subs = _sweep_events(300)
    for ev in subs:
        engine.on_job_event(ev)
    engine.on_job_event(_phase(subs[0], "started", 1.0))
    engine.on_job_event(_phase(subs[0], "finished", 90_001.0, duration_s=90_000.0))
    assert 0 < len(engine.updates) <= 16 + engine.refresh * 4


class _Liar:
    """A model whose expected durations rank jobs exactly backwards (longest first)."""

    name = "liar"
    version = "1"

    def __init__(self, truth: dict[str, float]) -> None:
        self.truth = truth

    def predict(self, job: JobEvent) -> DurationPrediction:
        return self.predict_one(job)

    def predict_one(self, job: JobEvent) -> DurationPrediction:
        d = self.truth.get(job.job_id, 1.0)
        return DurationPrediction(d, 1.0, d, d, expected_s=1e7 / max(d, 1.0))

    def learn(self, job: JobEvent, duration_s: float) -> None:
        return None

    def learn_one(self, job: JobEvent, duration_s: float) -> None:
        return None

    def expected_one(self, job: JobEvent, now: float | None = None) -> float:
        return self.predict_one(job).expected_s

    def observe_start(self, job: JobEvent) -> None:
        return None

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        return ()


def test_fifo_guard_falls_back_when_hints_lose_to_arrival_order() -> None:
    import random

    from models.simulator import SimJob, simulate_vc

    rnd = random.Random(0)
    jobs = [
        SimJob(f"j{i}", 100.0 * i, rnd.choice([10.0, 30.0, 100.0, 600.0]), 8) for i in range(2000)
    ]
    truth = {j.job_id: j.duration for j in jobs}
    store = InMemoryStore()
    engine = HintEngine(lambda: _Liar(truth), store, clock=lambda: 0.0)
    fallback: list[PriorityHint] = []

    class Ranker:
        def submit(self, i: int, t: float) -> float:
            j = jobs[i]
            ev = JobEvent(
                phase="submitted", job_id=j.job_id, num_gpus=8, time=t, submit_time=j.submit
            )
            hint = engine.on_job_event(ev)
            assert hint is not None
            if hint.reasons and hint.reasons[0].feature == "fifo_guard:fallback":
                fallback.append(hint)
            return hint.priority

        def start(self, i: int, t: float) -> None:
            j = jobs[i]
            engine.on_job_event(
                JobEvent(
                    phase="started",
                    job_id=j.job_id,
                    num_gpus=8,
                    time=t,
                    submit_time=j.submit,
                    start_time=t,
                )
            )

        def finish(self, i: int, t: float) -> list[tuple[int, float]]:
            j = jobs[i]
            engine.on_job_event(
                JobEvent(
                    phase="finished",
                    job_id=j.job_id,
                    num_gpus=8,
                    time=t,
                    submit_time=j.submit,
                    start_time=t - j.duration,
                    duration_s=j.duration,
                )
            )
            return [(int(h.job_id[1:]), h.priority) for h in engine.updates]

    guarded = simulate_vc(jobs, 2, "qssf", ranker=Ranker())
    st = engine.state("default", "default")
    assert st.guard.fallback and st.guard.switches >= 1
    fifo = simulate_vc(jobs, 2, "fifo")
    liar = simulate_vc(jobs, 2, "qssf", priorities=[1e7 / j.duration for j in jobs])

    def avg(out: list) -> float:  # type: ignore[type-arg]
        return sum(o.end - j.submit for o, j in zip(out, jobs, strict=True)) / len(jobs)

    assert avg(liar) > 1.5 * avg(fifo)  # the hints alone would hurt badly
    assert avg(guarded) < 1.15 * avg(fifo)  # the guard keeps it close to FIFO
    # hints published in fallback follow arrival order and say so
    assert fallback and all(h.priority == h.submit_time for h in fallback)


def test_pending_job_pickles_as_json_and_reads_the_old_dataclass_form() -> None:
    ev = JobEvent(phase="submitted", job_id="1", num_gpus=2, time=0, submit_time=0, user="u")
    h = PriorityHint(
        job_id="1", num_gpus=2, submit_time=0, predicted_duration_s=5.123456789,
        priority=10.246913578, model="m", model_version="1", created_at=0.5,
    )  # fmt: skip
    job = PendingJob(ev, h)
    clone = pickle.loads(pickle.dumps(job))
    assert clone == job and clone.hint.priority == h.priority  # floats exact
    job.hint = h.model_copy(update={"priority": 3.0})  # a hint update: pickled anew
    assert pickle.loads(pickle.dumps(job)).priority == 3.0
    old = PendingJob.__new__(PendingJob)
    old.__setstate__({"event": ev, "hint": h})  # how a dataclass pickle of before loads
    assert old == PendingJob(ev, h)
