"""Tests for ``gpuhint evaluate ces``, the load-series readers and the causality check."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuhint.cli import main
from gpuhint.lab.evaluation.ces import first_divergence, replay, summarize, window_slots
from gpuhint.lab.traces.loadseries import LoadSeries, SeriesError, read_series
from models.forecast import Forecast, LoadForecaster

DATA = Path(__file__).resolve().parents[2] / "data"
EARTH = DATA / "earth_8vcs_nodes_2020-05-20_3days.csv.gz"  # see tests/data/CES_SOURCES.md
VC = DATA / "earth_vc3sl_head30.csv"

JSON_KEYS = {
    "util_before",
    "util_after",
    "changes_per_day",
    "wakeups_per_day",
    "shortfall_events",
    "shortfall_node_slots",
    "slot_minutes",
    "n_slots",
    "total_nodes",
    "mean_powered_off",
    "forecast_mae",
}


# -- readers --------------------------------------------------------------------------


def test_reads_nodes_format_gz_and_resamples_with_max() -> None:
    s = read_series(EARTH)
    assert s.fmt == "nodes" and s.slot_s == 600 and s.n_slots == 3 * 144
    assert set(s.total) == {47}
    with gzip.open(EARTH, "rt") as fh:
        rows = [line.split(",") for line in fh.read().splitlines()[1:11]]
    assert s.used[0] == max(int(r[1]) for r in rows)  # first slot: max of its 10 minutes


def test_reads_helios_vc_format_in_nodes() -> None:
    s = read_series(VC)
    assert s.fmt == "helios-vc" and s.n_slots == 3
    assert s.total == [8, 8, 8]  # 64 GPUs / 8
    assert s.used[0] == 8  # ceil(59 / 8)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("2020-05-01 00:02:00,x,47", "active is not a number"),
        ("yesterday,3,47", "time is not a time"),
        ("2020-05-01 00:02:00,3", "expected at least 3 fields"),
        ("2020-05-01 00:02:00,50,47", "exceed total"),
        ("2020-05-01 00:00:30,3,47", "time goes backwards"),
        ("2020-05-01 00:02:00,-1,47", "non-negative"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, row: str, reason: str) -> None:
    p = tmp_path / "s.csv.gz"
    text = f"time,active,total\n2020-05-01 00:00:00,3,47\n2020-05-01 00:01:00,4,47\n{row}\n"
    p.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(SeriesError) as exc:
        read_series(p)
    assert exc.value.line == 4 and reason in exc.value.reason
    assert str(exc.value).startswith(f"{p}:4: ")
    skipped = read_series(p, on_error="skip")
    assert [e.line for e in skipped.errors] == [4] and skipped.rows == 2


def test_unknown_header(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("when,busy\n1,2\n")
    with pytest.raises(SeriesError, match=r"s.csv:1: unknown load-series header"):
        read_series(p)


def test_gap_is_carried_forward(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("time,active,total\n2020-05-01 00:00:00,3,9\n2020-05-01 00:25:00,5,9\n")
    s = read_series(p)
    assert s.used == [3, 3, 5] and s.filled_slots == 1


# -- causality --------------------------------------------------------------------------


class LeakyForecaster:
    """A forecaster handed the whole series by mistake: it 'forecasts' the true future."""

    horizon_slots = 18

    def __init__(self, series: LoadSeries) -> None:
        self.series = series
        self.i = 0

    def update(self, time: float, used: float, total: int) -> Forecast:
        u = self.series.used
        peak = float(max(u[self.i + 1 : self.i + 19] or [used]))
        self.i += 1
        return Forecast(time, 10800.0, peak, peak, peak + 1, total)


def test_replay_is_causal() -> None:
    s = read_series(EARTH)
    for cut in (150, 300):
        assert first_divergence(s, cut) is None


def test_causality_check_catches_a_leaky_forecaster() -> None:
    s = read_series(EARTH)
    bad = first_divergence(s, 300, factory_for=lambda ser: lambda: LeakyForecaster(ser))
    assert bad is not None and bad <= 300


def test_causality_check_with_another_alteration() -> None:
    s = read_series(EARTH)
    assert first_divergence(s, 200, alter=lambda i, u: 47 - u) is None


# -- metrics and the command -----------------------------------------------------------------


def test_summary_counts_shortfalls_per_timing_model() -> None:
    s = LoadSeries("toy", 0.0, 600, [2, 2, 9, 2], [10, 10, 10, 10])
    rec = replay(s, progress=False)
    rec.active = [10, 4, 4, 10]  # plans as if the policy had powered down after slot 0
    rec.changed = [True, False, True, False]
    rec.woke = [False, False, True, False]
    m = summarize(rec)
    assert m["shortfall_events"] == 1 and m["shortfall_node_slots"] == 5
    # a shortfall slot counts as fully used (nodes woke within it): 2/10, 2/4, 9/9, 2/10
    assert m["util_after"] == pytest.approx((0.2 + 0.5 + 1.0 + 0.2) / 4)
    assert m["changes_per_day"] == pytest.approx(2 / (4 * 600 / 86400))


def test_nodes_that_left_the_cluster_are_not_counted_as_powered_on() -> None:
    """The plan for a slot was made for the cluster before some nodes left: it can name
    more nodes on than the slot's total. Nodes that left are neither on nor powered
    off: the slot has no node off, not a negative count."""
    s = LoadSeries("toy", 0.0, 600, [2, 2, 2, 2], [10, 10, 6, 6])
    rec = replay(s, progress=False)
    rec.active = [10, 4, 8, 4]  # slot 2's plan was made for 10 nodes; 4 left
    m = summarize(rec)
    assert m["mean_powered_off"] == pytest.approx((0 + 6 + 0 + 2) / 4)
    assert m["util_after"] == pytest.approx((0.2 + 0.5 + 2 / 6 + 0.5) / 4)


def test_window_default_is_last_seven_days() -> None:
    s = LoadSeries("toy", 0.0, 600, [1] * (144 * 10), [2] * (144 * 10))
    assert window_slots(s) == (144 * 3, 144 * 10)
    assert window_slots(s, "1970-01-02", "1970-01-02") == (144, 288)
    with pytest.raises(ValueError):
        window_slots(s, "1971-01-01", "1971-01-02")


def test_evaluate_ces_json_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "ces.png"
    rc = main(
        [
            "evaluate",
            "ces",
            "--series",
            str(EARTH),
            "--test-from",
            "2020-05-21",
            "--json",
            "--plot",
            str(png),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out.strip()
    m = json.loads(out)  # ONE JSON object
    assert set(m) >= JSON_KEYS
    assert m["slot_minutes"] == 10 and m["total_nodes"] == 47 and m["n_slots"] == 2 * 144
    assert 0 < m["util_before"] <= m["util_after"] <= 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_ces_text_and_artifact_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "evaluate",
                "ces",
                "--no-plot",
                "--series",
                str(EARTH),
                "--policy",
                "artifact",
                "--buffer",
                "5",
                "--watts-per-node",
                "1000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "utilization" in out and "1000 W" in out


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--series", "/nonexistent.csv"], "nonexistent"),
        (["--test-from", "2021-01-01", "--test-to", "2021-01-02"], "no slots"),
        (["--test-from", "2021-01-01"], "is after"),
        (["--test-from", "May"], "not a date"),
        (["--horizon", "40"], "--horizon"),
        (["--nodes", "5"], "--nodes sizes the pool of a --trace run"),  # not ignored (review)
        (["--quantile", "0.5"], "--quantile applies to a --trace run only"),  # was ignored
        (["--max-cycles-per-node-day", "2"], "--max-cycles-per-node-day applies to a --trace"),
    ],
)
def test_user_errors_are_one_line(
    args: list[str], msg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    series = ["--series", str(EARTH)] if "--series" not in args else []
    argv = ["evaluate", "ces", "--no-plot", *series, *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_a_truncated_gzip_series_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: ``EOFError`` escaped as a traceback (not an ``OSError``)."""
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(EARTH.read_bytes()[:8000])
    assert main(["evaluate", "ces", "--no-plot", "--series", str(cut)]) == 2
    err = capsys.readouterr().err
    assert f"{cut}: cannot read: " in err and "Traceback" not in err
    rc = main(["analyze", "--no-progress", "--series", str(cut), "-o", str(tmp_path / "o"),
               str(DATA / "venus_qssf_300.csv")])  # fmt: skip
    assert rc == 2 and f"{cut}: cannot read: " in capsys.readouterr().err


def test_a_plot_path_is_what_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No extension: ``.png`` is added and the path printed is the file's; an extension
    matplotlib cannot write is refused before any work (review)."""
    argv = ["evaluate", "ces", "--series", str(EARTH), "--test-from", "2020-05-21", "--json"]
    assert main([*argv, "--no-frontier", "--plot", str(tmp_path / "load")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plot"] == str(tmp_path / "load.png") and (tmp_path / "load.png").is_file()
    assert main([*argv, "--plot", str(tmp_path / "load.txt")]) == 2
    assert "cannot write a plot as .txt" in capsys.readouterr().err


def test_forecaster_mae_is_reported() -> None:
    s = read_series(EARTH)
    rec = replay(s, forecaster_factory=LoadForecaster, progress=False)
    m = summarize(rec, 144, 432)
    # recounted as documented: |forecast at i - peak used over slots i+1 .. i+H|, for the
    # window's slots whose next H slots are all in the series
    h = rec.horizon_slots
    errs = [abs(rec.forecast[i] - max(s.used[i + 1 : i + 1 + h])) for i in range(144, 432 - h)]
    assert h == 18 and s.n_slots == 432
    assert m["forecast_mae"] == pytest.approx(sum(errs) / len(errs))


def test_series_energy_counts_booting_nodes_at_their_own_draw() -> None:
    # one node, boot 120 s: idle 0..120, off 120..240 (2 minutes), woken at 240 for the
    # demand and booting 240..360 (2 minutes of the measured 6): saved = off x (idle - off)
    # less boot x (boot - idle), the booting node drawing 1,700 W where all-on idles at 700
    from gpuhint.lab.evaluation.ces_series import idle_timer_point
    from gpuhint.lab.traces.loadseries import LoadSeries
    from models.simulator.power import PowerModel

    minutes = LoadSeries("t", 0.0, 60, [0, 0, 0, 0, 1, 1], [1] * 6)
    pm = PowerModel(boot_s=120.0, idle_w=700.0, boot_w=1700.0, off_w=20.0)
    p = idle_timer_point(minutes, 120, pm, 0, 6)
    assert p["node_hours_off"] == pytest.approx(2 / 60)
    assert p["shortfall_node_min"] == pytest.approx(2)
    assert p["energy_saved_kwh"] == pytest.approx(2 / 60 * (680 - 1000) / 1000)


def test_a_series_not_utf8_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: a byte that is not UTF-8 said the codec's position, no line."""
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"time,active,total\n2020-01-01 00:00:00,3,10\n2020-01-01 00:10:00,4\xff,10\n")
    assert main(["evaluate", "ces", "--no-plot", "--series", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: not UTF-8" in err and "Traceback" not in err


def test_a_series_gap_of_decades_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: 31 years between two rows filled ~1.7M slots for minutes (a
    unit mistake); a gap of months is a real outage and is carried forward."""
    gap = tmp_path / "gap.csv"
    gap.write_text("time,active,total\n0,3,10\n60,5,10\n980000000,4,10\n")
    argv = ["evaluate", "ces", "--no-plot", "--no-frontier", "--no-progress", "--series"]
    assert main([*argv, str(gap)]) == 2
    err = capsys.readouterr().err
    assert f"{gap}:4: time jumps" in err and "line 3" in err and "Traceback" not in err
    months = gap.with_name("months.csv")
    months.write_text("time,active,total\n0,3,10\n60,5,10\n" + f"{200 * 86400},4,10\n")
    s = read_series(months)
    assert s.n_slots == 200 * 144 + 1 and s.filled_slots == 200 * 144 - 1


def test_a_plot_folder_that_is_missing_is_said_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: the error came after the whole run, its results lost."""
    plot = tmp_path / "nodir" / "load.png"
    argv = ["evaluate", "ces", "--series", str(EARTH), "--no-frontier", "--plot", str(plot)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot save plot {plot}: no such folder" in err and "Traceback" not in err
