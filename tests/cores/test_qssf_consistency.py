"""Hints that agree with themselves: after a hint update the priority, the expected
duration, the point forecast, the band and the reasons describe one estimate."""

from __future__ import annotations

import json
import math

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase, PriorityHint, encode_message


def _sweep(n: int) -> list[JobEvent]:
    base = {"cluster": "c", "vc": "v", "user": "alice", "num_gpus": 4}
    return [
        JobEvent(phase="submitted", job_id=f"s{i}", time=60.0 * i, submit_time=60.0 * i, **base)
        for i in range(n)
    ]


def _moved_hints() -> tuple[dict[str, PriorityHint], dict[str, PriorityHint]]:
    from models.registry import DURATION_MODELS

    store = InMemoryStore()
    engine = HintEngine(DURATION_MODELS["history_mix"], store, clock=lambda: 0.0, wait_bound=0)
    subs = _sweep(3)
    at_submit = {}
    for ev in subs:
        h = engine.on_job_event(ev)
        assert h is not None
        at_submit[ev.job_id] = h
    engine.on_job_event(
        subs[0].model_copy(update={"phase": JobPhase.STARTED, "time": 1.0, "start_time": 1.0})
    )
    engine.on_job_event(
        subs[0].model_copy(
            update={"phase": JobPhase.FINISHED, "time": 50_001.0, "duration_s": 50_000.0}
        )
    )
    store.flush()
    moved = {jid: store.get_hint("c", jid) for jid in ("s1", "s2")}
    assert all(h is not None for h in moved.values())
    return at_submit, moved  # type: ignore[return-value]


def test_a_moved_hint_describes_one_estimate() -> None:
    at_submit, moved = _moved_hints()
    for jid, h in moved.items():
        before = at_submit[jid]
        assert before.expected_duration_s is not None and h.expected_duration_s is not None
        assert before.priority == before.num_gpus * before.expected_duration_s
        assert h.priority != before.priority  # it moved
        assert math.isclose(h.priority, h.num_gpus * h.expected_duration_s, rel_tol=1e-12)
        r = h.expected_duration_s / before.expected_duration_s
        assert math.isclose(h.predicted_duration_s, before.predicted_duration_s * r, rel_tol=1e-9)
        assert before.duration_p10_s is not None and before.duration_p90_s is not None
        assert math.isclose(h.duration_p10_s or 0.0, before.duration_p10_s * r, rel_tol=1e-9)
        assert math.isclose(h.duration_p90_s or 0.0, before.duration_p90_s * r, rel_tol=1e-9)
        assert h.log_duration_std == before.log_duration_std
        assert h.reasons[0].feature == "updated:expected_s"
        assert math.isclose(h.reasons[0].contribution, h.expected_duration_s, rel_tol=1e-12)
        # the band still brackets the point forecast, as at submit
        assert (h.duration_p10_s or 0.0) <= h.predicted_duration_s <= (h.duration_p90_s or 0.0)


def test_the_hint_json_only_adds_keys() -> None:
    at_submit, moved = _moved_hints()
    old_keys = {
        "schema_version", "kind", "job_id", "cluster", "vc", "user", "num_gpus",
        "submit_time", "predicted_duration_s", "priority", "duration_p10_s",
        "duration_p90_s", "log_duration_std", "model", "model_version", "reasons",
        "created_at",
    }  # fmt: skip
    for h in (*at_submit.values(), *moved.values()):
        keys = set(json.loads(encode_message(h)))
        assert old_keys <= keys and keys - old_keys == {"expected_duration_s"}


def test_a_hint_of_before_the_field_is_rescaled_from_its_priority() -> None:
    from models.hint_estimate import rescaled

    old = PriorityHint(
        job_id="1", num_gpus=2, submit_time=0, predicted_duration_s=50, priority=200,
        duration_p10_s=10, duration_p90_s=300, model="m", model_version="1", created_at=0,
    )  # fmt: skip
    assert rescaled(old, 200.0) == {
        "expected_duration_s": 200.0,
        "predicted_duration_s": 100.0,
        "duration_p10_s": 20.0,
        "duration_p90_s": 600.0,
    }
