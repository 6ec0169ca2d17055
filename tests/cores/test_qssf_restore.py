"""A hint core restored from its pickled states decides as one never stopped."""

from __future__ import annotations

import pickle
from collections.abc import MutableMapping
from pathlib import Path

import pytest

from gpuhint.cores.qssf import HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent, PriorityHint
from models.registry import make_model

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"


def _engine(
    model: str, states: MutableMapping[str, VcState] | None = None
) -> tuple[HintEngine, InMemoryStore]:
    store = InMemoryStore()
    engine = HintEngine(
        lambda: make_model(model), store, states=states, clock=lambda: 0.0, wait_bound=1.0
    )
    return engine, store


def _step(engine: HintEngine, store: InMemoryStore, e: JobEvent) -> tuple[object, ...]:
    """Apply one event; what it wrote: its hint, its hint updates, the VC's starts."""
    store.flush()
    store.starts.clear()
    hint: PriorityHint | None = engine.on_job_event(e)
    store.flush()
    starts = store.get_starts(e.cluster, e.vc)
    return (
        e.job_id,
        e.phase.value,
        hint and hint.model_dump_json(),
        [h.model_dump_json() for h in engine.updates],
        starts and starts.model_dump_json(),
    )


@pytest.mark.parametrize("model", ["history", "history_mix"])
def test_a_restore_changes_no_decision(model: str) -> None:
    events = job_events(read_trace(TRACE).jobs)
    a, sa = _engine(model)
    ref = [_step(a, sa, e) for e in events]
    b, sb = _engine(model)
    got = []
    for i, e in enumerate(events):
        if i % 97 == 50:
            states = {k: pickle.loads(pickle.dumps(v)) for k, v in b.states.items()}
            b, sb = _engine(model, states)
        got.append(_step(b, sb, e))
    for i, (x, y) in enumerate(zip(ref, got, strict=True)):
        assert x == y, i
