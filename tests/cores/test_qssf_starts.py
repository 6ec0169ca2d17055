"""The expected starts the hint core publishes: after the starvation bound, with a band
around the expected start, and in arrival order while the FIFO guard has fallen back."""

from __future__ import annotations

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.cores.start_forecast import StartBook, Waiting
from gpuhint.wire.contract import JobEvent
from tests.cores.test_qssf_wait_bound import _Truth

T0 = 1.7e9


def _ev(phase: str, jid: str, t: float, gpus: int = 8, sub: float | None = None) -> JobEvent:
    return JobEvent(
        phase=phase,  # type: ignore[arg-type]
        job_id=jid,
        num_gpus=gpus,
        time=t,
        submit_time=t if sub is None else sub,
        start_time=t if phase != "submitted" else None,
    )


def test_starts_published_in_the_event_that_promotes_put_the_overdue_job_first() -> None:
    store = InMemoryStore()
    truth = {"a": 100.0, "b": 10.0, "c": 1.0, "d": 1.0}
    engine = HintEngine(lambda: _Truth(truth), store, wait_bound=2.0)
    engine.state("default", "default").bound.scale = 10.0  # limit 20 s
    for jid, t in (("a", 100.0), ("b", 101.0), ("c", 102.0)):
        engine.on_job_event(_ev("submitted", jid, t, gpus=1))
    engine.on_job_event(_ev("submitted", "d", 400.0, gpus=1))  # a overdue; starts due
    assert [h.job_id for h in engine.updates] == ["a"]
    store.flush()
    queue = [j for j, _ in store.queue("default", "default")]
    starts = store.get_starts("default", "default")
    assert starts is not None and starts.time == 400.0
    assert queue[0] == "a"
    assert [j.job_id for j in starts.jobs] == queue  # the queue's rank order


def test_an_uncalibrated_start_band_contains_the_expected_start() -> None:
    """r runs past its p10 duration: the p10 run gives it a minute more, past the end
    the expected run gives it; the band still holds the expected start."""
    store = InMemoryStore()
    truth = {"r": 1000.0, "w": 10.0, "x": 10000.0}
    engine = HintEngine(lambda: _Truth(truth), store, wait_bound=0.0)
    engine.on_job_event(_ev("submitted", "r", 0))
    engine.on_job_event(_ev("started", "r", 0, sub=0))
    engine.on_job_event(_ev("submitted", "w", 5))
    engine.on_job_event(_ev("submitted", "x", 990))  # a forecast is due now
    store.flush()
    starts = store.get_starts("default", "default")
    assert starts is not None
    f = {j.job_id: j for j in starts.jobs}["w"]
    assert f.low <= f.expected <= f.high
    assert f.expected == 1000.0


def test_the_book_keeps_every_band_around_its_expected_start() -> None:
    book = StartBook()
    book.started("r", start=0.0, gpus=4, expected=100.0, low=50.0, high=200.0)
    book.capacity = 4
    w = [Waiting("w", 4, 10.0, 10.0, 5.0, 20.0), Waiting("v", 4, 20.0, 10.0, 5.0, 20.0)]
    for now in (0.0, 60.0, 95.0, 150.0, 300.0):
        got = book.forecast(now, w)
        assert set(got) == {"w", "v"}, now  # every waiting job has a forecast to check
        for f in got.values():
            assert f.low <= f.expected <= f.high, (now, f)


def _fallback_wait(fallback: bool) -> float:
    store = InMemoryStore()
    engine = HintEngine(lambda: _Truth({"r": 1000.0, "w": 10.0}), store, wait_bound=0.0)
    st = engine.state("default", "default")
    st.guard.fallback = fallback
    engine.on_job_event(_ev("submitted", "r", T0 - 400))
    engine.on_job_event(_ev("started", "r", T0 - 400, sub=T0 - 400))
    engine.on_job_event(_ev("submitted", "w", T0 + 10))  # forecast published here
    # the arrivals are booked at the model's priority (GPU-seconds), not the submit time
    assert [p for _, p in st.starts.arrivals] == [8000.0, 80.0]
    store.flush()
    starts = store.get_starts("default", "default")
    assert starts is not None
    (f,) = starts.jobs
    return f.expected - (T0 + 10)


def test_fifo_fallback_does_not_treat_submit_times_as_gpu_seconds() -> None:
    assert _fallback_wait(False) == 590.0  # r frees its 8 GPUs at T0 + 600
    # in arrival order nobody overtakes w: its wait is r's remaining time
    assert _fallback_wait(True) == 590.0


def test_no_overtaking_in_arrival_order() -> None:
    book = StartBook()
    book.started("r", start=3000.0, gpus=8, expected=1200.0, low=1200.0, high=1200.0)
    for t in range(0, 3600, 60):
        book.arrived(float(t), 1000.0)  # much work arrived, ranked ahead of w
    w = [Waiting("w", 8, 1e5, 10.0, 10.0, 10.0)]
    assert book.forecast(3600.0, w)["w"].expected == 3600.0 + 5 * 600.0  # overtaken
    assert book.forecast(3600.0, w, overtake=False)["w"].expected == 4200.0  # r's end
