"""The ``expected_start`` block: gpuhint's forecasts and the time-limit estimate, scored
on the same jobs."""

from __future__ import annotations

from gpuhint.cores.start_forecast import StartBook
from gpuhint.lab.evaluation.starts import StartRecorder, start_accuracy
from gpuhint.wire.contract import ExpectedStart, StartForecasts


def _recorder(
    first: dict[int, tuple[float, float, float]], by_limit: dict[int, float]
) -> StartRecorder:
    n = 4
    rec = StartRecorder(index_of={str(i): i for i in range(n)}, gpus=[1] * n, limits=[None] * n)
    rec.first.update(first)
    rec.by_limit.update(by_limit)
    return rec


def test_errors_relative_to_the_wait_and_band_coverage() -> None:
    submit = [0.0, 0.0, 0.0, 0.0]
    start = [1000.0, 2000.0, 10.0, 4000.0]  # job 2 waited under a minute: not counted
    rec = _recorder(
        {0: (1500.0, 900.0, 1600.0), 1: (2000.0, 2500.0, 3000.0), 2: (5.0, 0.0, 9.0)},
        by_limit={0: 3000.0},
    )
    es = start_accuracy([(submit, start, rec)])
    assert es["jobs_waited"] == 3 and es["jobs_forecast"] == 2  # job 3 never named
    assert es["median_rel_error"] == 0.25  # median of 0.5 and 0.0
    assert es["band_coverage"] == 0.5  # job 0 inside, job 1 before its band
    # the limit estimate named job 0 only: both figures on that one job
    assert es["limit_jobs"] == 1
    assert es["limit_median_rel_error"] == 2.0
    assert es["median_rel_error_limit_jobs"] == 0.5
    assert es["exact_median_rel_error"] is None  # no durations given


def test_the_exact_estimate_is_squeue_start_on_the_true_durations() -> None:
    """One 8-GPU VC: a job running since 0 for 1,000 s, two 8-GPU jobs waiting in rank
    order (durations 500 and 300 s). Exact limits say: 1,000 and 1,500."""
    rec = StartRecorder(
        index_of={"r": 0, "a": 1, "b": 2},
        gpus=[8, 8, 8],
        limits=[None, None, None],
        durations=[1000.0, 500.0, 300.0],
    )
    book = StartBook()
    book.started("r", start=0.0, gpus=8, expected=10.0, low=10.0, high=10.0)
    shown = StartForecasts(
        cluster="c", vc="v", time=100.0,
        jobs=(
            ExpectedStart(job_id="a", expected=110.0, low=100.0, high=200.0),
            ExpectedStart(job_id="b", expected=900.0, low=800.0, high=950.0),
        ),
    )  # fmt: skip
    rec.record(shown, book)
    assert rec.by_exact == {1: 1000.0, 2: 1500.0}
    assert rec.by_limit == {}  # no limits
    # job a started at 1,100 (a 1,000 s wait), job b at 1,600
    es = start_accuracy([([0.0, 100.0, 100.0], [0.0, 1100.0, 1600.0], rec)])
    assert es["exact_median_rel_error"] == 0.0833  # median of 100 / 1,000 and 100 / 1,500


def test_no_limits_no_limit_figures() -> None:
    rec = _recorder({0: (1000.0, 900.0, 1100.0)}, by_limit={})
    es = start_accuracy([([0.0] * 4, [1000.0, 0.0, 0.0, 0.0], rec)])
    assert es["median_rel_error"] == 0.0 and es["band_coverage"] == 1.0
    assert es["limit_median_rel_error"] is None and es["median_rel_error_limit_jobs"] is None
