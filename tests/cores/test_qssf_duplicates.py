"""Exactly-once learning per (job, phase): a producer's resend is a new Kafka record
(a new offset), so the offset watermark does not catch it; the engine must."""

from __future__ import annotations

import pickle
import random
from collections import Counter
from pathlib import Path

from gpuhint.cores.qssf import RECENT_FINISHED_MAX, HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent, JobPhase
from models.history import HistoryEstimator
from models.registry import make_model

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"


def _engine() -> tuple[HintEngine, InMemoryStore]:
    store = InMemoryStore()
    return HintEngine(lambda: make_model("history_mix"), store, clock=lambda: 0.0), store


def _with_duplicates(events: list[JobEvent], seed: int = 3) -> list[tuple[bool, JobEvent]]:
    """The events with ~2% resent: half right after, half 50-400 events later."""
    rnd = random.Random(seed)
    later: dict[int, list[JobEvent]] = {}
    out: list[tuple[bool, JobEvent]] = []
    for i, e in enumerate(events):
        out.append((False, e))
        out.extend((True, d) for d in later.pop(i, []))
        if rnd.random() < 0.02:
            if rnd.random() < 0.5:
                out.append((True, e))
            else:
                later.setdefault(i + rnd.randint(50, 400), []).append(e)
    for ds in later.values():
        out.extend((True, d) for d in ds)
    return out


def _run(stream: list[tuple[bool, JobEvent]]) -> tuple[HintEngine, InMemoryStore, list[object]]:
    """Feed the stream (each record its own offset); what the originals published."""
    engine, store = _engine()
    published: list[object] = []
    for off, (dup, e) in enumerate(stream):
        hint = engine.on_job_event(e, offset=off)
        if dup:
            assert engine.updates == []  # a resend re-ranks nothing
            continue
        published.append(
            (
                e.job_id,
                e.phase.value,
                hint and hint.priority,
                [(h.job_id, h.priority) for h in engine.updates],
            )
        )
    store.flush()
    return engine, store, published


def test_resent_events_change_no_priority() -> None:
    events = job_events(read_trace(TRACE).jobs)
    stream = _with_duplicates(events)
    dups = [e for dup, e in stream if dup]
    phases = Counter(e.phase for e in dups)
    assert 0.01 * len(events) <= len(dups) <= 0.03 * len(events)
    assert all(phases[p] for p in JobPhase), phases  # every phase is resent
    clean_engine, clean_store, clean = _run([(False, e) for e in events])
    engine, store, noisy = _run(stream)
    assert noisy == clean  # every hint and every hint update, in order
    assert engine.stats.duplicates == len(dups)
    assert engine.stats.learned == clean_engine.stats.learned
    for key, st in clean_engine.states.items():
        other = engine.states[key]
        assert {j: p.hint for j, p in other.pending.items()} == {
            j: p.hint for j, p in st.pending.items()
        }
        assert other.running == st.running and other.running_gpus == st.running_gpus
    # the store saw the same changes: resends re-emit only idempotent, unannounced writes
    assert store.changes == clean_store.changes
    assert store.hints == clean_store.hints and store.queues == clean_store.queues


def ev(phase: str, job: str, t: float, dur: float | None = None) -> JobEvent:
    return JobEvent(
        phase=JobPhase(phase), job_id=job, user="u", vc="v", num_gpus=2, time=t, submit_time=0,
        duration_s=dur, start_time=None if phase == "submitted" else 0,
    )  # fmt: skip


def test_each_phase_is_applied_once_per_job() -> None:
    store = InMemoryStore()
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store, clock=lambda: 1.0)
    first = engine.on_job_event(ev("submitted", "a", 0))
    again = engine.on_job_event(ev("submitted", "a", 0))  # still waiting: no re-predict
    assert first is not None and again == first
    engine.on_job_event(ev("started", "a", 1))
    engine.on_job_event(ev("submitted", "a", 0))  # running: no hint comes back
    engine.on_job_event(ev("started", "a", 1))
    st = engine.states["default/v"]
    assert st.running_gpus == 2 and list(st.running) == ["a"]
    engine.on_job_event(ev("finished", "a", 11, dur=10))
    for e in (ev("finished", "a", 11, dur=10), ev("started", "a", 1), ev("submitted", "a", 0)):
        assert engine.on_job_event(e) is None
    s = engine.stats
    assert (s.submitted, s.started, s.finished, s.learned, s.duplicates) == (1, 1, 1, 1, 6)
    assert st.pending == {} and st.running == {} and st.running_gpus == 0
    store.flush()
    assert store.queue("default", "v") == [] and store.get_hint("default", "a") is None
    # a finish never seen before (a replay that starts mid-way) is still learned once
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    assert s.learned == 2 and s.duplicates == 7


def test_finished_ids_are_remembered_in_a_bounded_lru() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    for i in range(RECENT_FINISHED_MAX + 10):
        engine.on_job_event(ev("finished", f"j{i}", i, dur=5))
    st = engine.states["default/v"]
    assert len(st.recent_finished) == RECENT_FINISHED_MAX
    assert "j9" not in st.recent_finished and "j10" in st.recent_finished
    engine.on_job_event(ev("finished", "j10", 1, dur=5))  # a resend: refreshed, not learned
    assert list(st.recent_finished)[-1] == "j10"
    assert engine.stats.learned == RECENT_FINISHED_MAX + 10


def test_old_vc_state_pickles_load_without_the_finished_ids() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    engine.on_job_event(ev("submitted", "a", 0), offset=0)
    old = engine.states["default/v"]
    del old.__dict__["recent_finished"]  # the layout of a pickle of before
    blob = pickle.dumps(old)
    assert b"recent_finished" not in blob
    st = pickle.loads(blob)
    assert isinstance(st, VcState) and st.recent_finished == {} and st.applied_offset == 0
    assert list(st.pending) == ["a"]
    engine.states["default/v"] = st
    engine.on_job_event(ev("started", "a", 1), offset=1)
    engine.on_job_event(ev("finished", "a", 11, dur=10), offset=2)
    engine.on_job_event(ev("finished", "a", 11, dur=10), offset=3)
    assert engine.stats.learned == 1 and list(st.recent_finished) == ["a"]
    assert pickle.loads(pickle.dumps(st)).recent_finished == {"a": None}
