"""Expected start times: the forward simulation of a VC and what the engine publishes."""

from __future__ import annotations

import pytest

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.cores.start_forecast import StartBook, Waiting
from gpuhint.wire.contract import JobEvent
from models.history import HistoryEstimator


def _w(job: str, gpus: int, prio: float, dur: float) -> Waiting:
    return Waiting(job, gpus, prio, dur, dur / 2, dur * 2)


def test_jobs_start_in_rank_order_as_gpus_free_up() -> None:
    book = StartBook(capacity=8)
    book.started("r1", start=0.0, gpus=4, expected=100.0, low=50.0, high=200.0)
    book.started("r2", start=0.0, gpus=4, expected=300.0, low=150.0, high=600.0)
    f = book.forecast(0.0, [_w("a", 4, 1.0, 50.0), _w("b", 8, 2.0, 10.0), _w("c", 1, 3.0, 5.0)])
    assert f["a"].expected == 100.0  # r1 frees 4 GPUs
    assert f["b"].expected == 300.0  # needs all 8: after r2 (a ends at 150)
    assert f["c"].expected == 310.0  # head of line: behind b, no backfill
    for s in f.values():
        assert s.low <= s.expected <= s.high


def test_a_running_job_past_its_expected_end_still_holds_its_gpus() -> None:
    book = StartBook(capacity=2)
    book.started("late", start=0.0, gpus=2, expected=100.0, low=50.0, high=200.0)
    f = book.forecast(1000.0, [_w("a", 1, 1.0, 10.0)])
    assert f["a"].expected > 1000.0  # not "now": a tenth of its duration, at least a minute


def test_arrivals_ranked_ahead_stretch_the_wait() -> None:
    book = StartBook(capacity=4)
    book.started("r", start=0.0, gpus=4, expected=1000.0, low=500.0, high=2000.0)
    for t in range(0, 3600, 60):  # 60 small jobs of 80 GPU-s: a third of 4 GPUs for 1 h
        book.arrived(float(t), 80.0)
    # at 3600 s r is past its expected end: 100 s more (a tenth of it)
    big = book.forecast(3600.0, [_w("big", 4, 1e6, 100.0)])["big"]
    assert big.expected == pytest.approx(3600.0 + 100.0 / (1 - 1 / 3))
    tiny = book.forecast(3600.0, [_w("tiny", 4, 50.0, 100.0)])["tiny"]
    assert tiny.expected == pytest.approx(3700.0)  # nothing arrived ahead of it


def test_the_engine_publishes_a_bounded_forecast_per_vc_on_a_cadence() -> None:
    store = InMemoryStore()
    engine = HintEngine(HistoryEstimator, store, start_every_s=60.0, start_limit=3)
    for phase in ("submitted", "started"):
        engine.on_job_event(
            JobEvent(phase=phase, job_id="r", vc="a", num_gpus=4, time=0, submit_time=0)
        )
    for i in range(5):
        engine.on_job_event(
            JobEvent(phase="submitted", job_id=f"w{i}", vc="a", num_gpus=1, time=float(i),
                     submit_time=float(i))
        )  # fmt: skip
    store.flush()
    starts = store.get_starts("default", "a")
    assert starts is not None and starts.time == 0.0  # at r's submit, then every 60 s
    assert [j.job_id for j in starts.jobs] == ["r"]
    engine.on_job_event(
        JobEvent(phase="submitted", job_id="w9", vc="a", num_gpus=1, time=100.0, submit_time=100)
    )
    store.flush()
    again = store.get_starts("default", "a")
    assert again is not None and again.time == 100.0
    assert [j.job_id for j in again.jobs] == ["w0", "w1", "w2"]  # the first 3 by rank
    for j in again.jobs:  # r holds all 4 GPUs: nobody starts before it ends
        assert 100.0 < j.low <= j.expected <= j.high
