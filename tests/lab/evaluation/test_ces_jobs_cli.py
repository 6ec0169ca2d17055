"""``gpuhint evaluate ces --trace`` and the --series frontier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cli import main
from gpuhint.lab.evaluation.ces_jobs import POINT_KEYS, default_check, dominance

DATA = Path(__file__).resolve().parents[2] / "data"
ITP = DATA / "itp_cluster01_400.csv"
VENUS = DATA / "venus_qssf_300.csv"
SACCT = DATA / "slurm" / "sacct_parsable.txt"
EARTH = DATA / "earth_8vcs_nodes_2020-05-20_3days.csv.gz"


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("trace", [ITP, VENUS])
def test_trace_json_has_both_frontiers(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "f.png"
    m = _json(["evaluate", "ces", "--trace", str(trace), "--json", "--plot", str(png)], capsys)
    fr = m["frontier"]
    assert fr["idle_timer"][0]["setting"] == 300
    assert 3600 in [p["setting"] for p in fr["idle_timer"]]
    assert fr["idle_timer"][-1]["setting"] == 86400
    for p in [*fr["idle_timer"], *fr["gpuhint"], m["default"]]:
        assert set(POINT_KEYS) <= set(p)
        assert p["node_hours_off"] >= 0 and p["jobs_delayed"] >= 0
    # a longer SuspendTime keeps more nodes on
    offs = [p["node_hours_off"] for p in fr["idle_timer"]]
    assert offs[0] > offs[-1]
    assert m["all_on"]["energy_kwh"] > 0 and m["nodes"] >= 1
    assert len(m["dominance"]) == len(fr["idle_timer"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "ces", "--trace", str(ITP), "--no-plot", "--nodes", "12"]
    assert main([*argv, "--boot-time", "120", "--scheduler", "qssf"]) == 0
    out = capsys.readouterr().out
    assert "idle 1h" in out and "gpuhint q0.98" in out and "12 nodes" in out
    assert "boot 120 s" in out and "qssf queue" in out


def test_sacct_trace_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    m = _json(["evaluate", "ces", "--trace", str(SACCT), "--json", "--no-plot"], capsys)
    assert m["format"] == "sacct" and m["jobs"] >= 1


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--format", "nodes"], "load series format"),
        (["--nodes", "0"], "--nodes"),
        (["--nodes", "1"], "asks for 64 GPUs"),
        (["--target-load", "2"], "--target-load"),
        (["--boot-time", "-5"], "--boot-time"),
        (["--quantile", "3"], "--quantile"),
    ],
)
def test_trace_user_errors(args: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "ces", "--no-plot", "--trace", str(ITP), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_series_and_trace_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "ces", "--trace", str(ITP), "--series", str(EARTH)])
    capsys.readouterr()
    argv = ["evaluate", "ces", "--no-plot", "--series", str(EARTH), "--format", "philly"]
    assert main(argv) == 2
    assert "--trace" in capsys.readouterr().err


def test_series_json_gains_the_frontier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "load.png"
    argv = ["evaluate", "ces", "--series", str(EARTH), "--test-from", "2020-05-21"]
    m = _json([*argv, "--json", "--plot", str(png)], capsys)
    assert {"util_before", "util_after", "shortfall_node_slots", "forecast_mae"} <= set(m)
    fr = m["frontier"]
    for p in [*fr["idle_timer"], *fr["gpuhint"], m["default"]]:
        assert set(POINT_KEYS) <= set(p) and p["shortfall_node_min"] >= 0
        assert p["added_wait_avg_s"] is None and p["added_wait_p99_s"] is None
    assert 3600 in [p["setting"] for p in fr["idle_timer"]]
    shorts = [p["shortfall_node_min"] for p in fr["idle_timer"]]
    assert shorts[0] >= shorts[-1]
    assert Path(m["frontier_plot"]).read_bytes()[:4] == b"\x89PNG"


def test_dominance_and_default_check() -> None:
    timer = [
        {"setting": 600, "energy_saved_kwh": 10.0, "added_wait_avg_s": 50.0},
        {"setting": 3600, "energy_saved_kwh": 8.0, "added_wait_avg_s": 20.0},
    ]
    gh = [
        {"setting": 0.9, "energy_saved_kwh": 9.0, "added_wait_avg_s": 10.0},
        {"setting": 0.5, "energy_saved_kwh": 11.0, "added_wait_avg_s": 60.0},
    ]
    assert dominance(timer, gh) == [
        {"suspend_s": 600, "by": None},
        {"suspend_s": 3600, "by": 0.9},
    ]
    chk = default_check(gh[0], timer)
    assert chk["energy_ok"] and chk["wait_ok"]
    assert not default_check(gh[1], timer)["wait_ok"]


@pytest.mark.parametrize("rows", ["1,0,100,8\n", "1,5,100,8\n2,5,50,8\n3,5,30,16\n"])
def test_a_trace_submitted_at_one_instant_is_refused(
    rows: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: one job, or all at once, measured energy over 0 s: every row
    0 kWh, utilization nan%, and "gpuhint dominates the idle timer at 10 of 10"."""
    trace = tmp_path / "once.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    rc = main(["evaluate", "ces", "--no-plot", "--no-progress", "--json", "--trace", str(trace)])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert f"{trace}: every GPU job is submitted at the same time" in out.err


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--nodes", "1000000000"], "--nodes must be 1..100,000"),
        (["--target-load", "1e-12"], "sizes the pool to"),
    ],
)
def test_a_pool_of_absurd_size_is_refused(
    args: list[str], msg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: a typo'd --nodes (or a tiny --target-load) was a MemoryError
    traceback, or hours of simulation (1,000,000 nodes: minutes for 300 jobs)."""
    assert main(["evaluate", "ces", "--no-plot", "--no-progress", "--trace", str(ITP), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
