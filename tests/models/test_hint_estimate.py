"""One estimate per hint (models/hint_estimate.py): a moved expected duration moves the
point forecast and the band with it, from an estimate of 0 too."""

from __future__ import annotations

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, PriorityHint
from models.hint_estimate import rescaled
from models.history import HistoryEstimator


def _hint(std: float | None, band: bool = True) -> PriorityHint:
    return PriorityHint(
        job_id="1",
        num_gpus=1,
        submit_time=0,
        predicted_duration_s=0,
        priority=0,
        duration_p10_s=0 if band else None,
        duration_p90_s=0 if band else None,
        log_duration_std=std,
        model="m",
        model_version="1",
        created_at=0,
        expected_duration_s=0,
    )


def test_rescaled_from_zero_rebuilds_the_point_and_the_band() -> None:
    out = rescaled(_hint(1.0), 500.0)
    assert out["expected_duration_s"] == out["predicted_duration_s"] == 500.0
    assert 0 < out["duration_p10_s"] < 500.0 < out["duration_p90_s"]


def test_rescaled_from_zero_without_a_spread_gives_a_band_equal_to_the_point() -> None:
    out = rescaled(_hint(None), 500.0)
    assert out["predicted_duration_s"] == out["duration_p10_s"] == out["duration_p90_s"] == 500
    assert "duration_p10_s" not in rescaled(_hint(1.0, band=False), 500.0)  # no band: none
    assert rescaled(_hint(1.0), 0.0) == {"expected_duration_s": 0.0}  # nothing moved


def test_a_hint_updated_from_a_zero_estimate_keeps_one_estimate() -> None:
    store = InMemoryStore()
    engine = HintEngine(HistoryEstimator, store, wait_bound=0.0, clock=lambda: 0.0)

    def j(phase: str, jid: str, t: float, **kw: object) -> JobEvent:
        return JobEvent(phase=phase, job_id=jid, user="u", num_gpus=1, time=t, submit_time=0, **kw)  # type: ignore[arg-type]

    engine.on_job_event(j("finished", "a", 1, duration_s=0.0))  # a job that ran 0 s
    h = engine.on_job_event(j("submitted", "x", 2))
    assert h is not None and h.expected_duration_s == h.predicted_duration_s == 0.0
    engine.on_job_event(j("finished", "b", 3, duration_s=1000.0))  # x's sibling
    store.flush()
    h = store.get_hint("default", "x")
    assert h is not None and h.expected_duration_s == 500.0 and h.priority == 500.0
    assert h.predicted_duration_s == 500.0
    assert h.duration_p10_s is not None and h.duration_p90_s is not None
    assert h.duration_p10_s <= h.predicted_duration_s <= h.duration_p90_s
