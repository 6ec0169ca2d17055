"""``evaluate qssf --wait-bound-curve``: the closed-loop qssf policy at each bound factor,
each point the same run as ``--wait-bound F`` alone, and the CLI's table, JSON and plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpuhint.cli import main
from gpuhint.lab.evaluation.qssf import evaluate_qssf
from gpuhint.lab.evaluation.qssf_curve import parse_factors
from gpuhint.lab.evaluation.qssf_inputs import read_vc_config
from gpuhint.lab.traces.readers import read_trace

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "venus_qssf_300.csv"
VCS = DATA / "venus_qssf_vc_config.csv"


def test_each_point_is_the_qssf_run_at_that_factor() -> None:
    """The curve's points are what ``--wait-bound F`` alone gives (the run at the
    report's own factor reused, the others run afresh), tails against the same FIFO."""
    jobs = read_trace(TRACE).jobs
    vcs = read_vc_config(str(VCS))

    def run(bound: float, curve: tuple[float, ...] = ()):  # type: ignore[no-untyped-def]
        return evaluate_qssf(jobs, model="history_mix", vc_nodes=vcs, wait_bound=bound,
                             bound_curve=curve)  # fmt: skip

    report = run(16.0, (0.0, 1.0, 16.0))
    assert report.wait_bound_curve is not None
    points = {p.factor: p for p in report.wait_bound_curve}
    assert set(points) == {0.0, 1.0, 16.0}
    for factor, point in points.items():
        alone = run(factor)
        qssf = alone.policies["qssf"]
        assert point.avg_jct_s == qssf.summary.avg_jct_s, factor
        assert point.tails == qssf.tails, factor
        assert point.overdue == alone.overdue, factor
    assert points[16.0].overdue > 0 and points[0.0].overdue == 0  # the bound acts here
    rows = {d["factor"]: d for d in report.as_dict()["wait_bound_curve"]}
    assert rows[0.0]["avg_jct_change"] == 0.0
    off = points[0.0].avg_jct_s
    assert rows[1.0]["avg_jct_change"] == pytest.approx(points[1.0].avg_jct_s / off - 1, abs=1e-6)
    fifo = report.policies["fifo"].tails
    assert fifo is not None
    assert rows[1.0]["max_wait_over_fifo"] == pytest.approx(
        points[1.0].tails.max_wait_s / fifo.max_wait_s, rel=1e-5
    )


def test_no_curve_unless_asked_and_none_in_the_open_loop() -> None:
    jobs = read_trace(TRACE).jobs
    plain = evaluate_qssf(jobs, model="history").as_dict()
    assert plain["wait_bound_curve"] is None and "curve" not in plain["seconds"]
    opened = evaluate_qssf(jobs, model="history", loop="open", bound_curve=(1.0,))
    assert opened.wait_bound_curve is None


@pytest.mark.parametrize("text", ["", "1,x", "-1", "nan", "1,inf"])
def test_bad_factor_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="factors"):
        parse_factors(text)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["evaluate", "qssf", "--trace", str(TRACE), "--vc-config", str(VCS), *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_table_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = _cli(capsys, "--wait-bound-curve", "1,4", "--plot", str(tmp_path / "q.png"))
    assert rc == 0, err
    lines = out.splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("starvation bound along"))
    header, rows = lines[at + 1], lines[at + 3 : at + 7]
    for label in ("factor", "avg JCT s", "vs off", "max wait", "p99 wait", ">2x FIFO", "overdue"):
        assert label in header
    assert [r.split()[0] for r in rows] == ["off", "1", "4", "16"]
    assert "(this run)" in rows[3] and "+0.0%" in rows[0]
    assert (tmp_path / "q_wait_bound.png").stat().st_size > 10_000
    rc, out, err = _cli(capsys, "--wait-bound-curve", "--no-plot", "--json", "--no-progress")
    assert rc == 0, err
    doc = json.loads(out)
    curve = doc["wait_bound_curve"]
    assert doc["seconds"]["curve"] > 0  # six more runs
    assert [p["factor"] for p in curve] == [0.0, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0]
    keys = {"factor", "avg_jct_s", "avg_jct_change", "max_wait_s", "p99_wait_s",
            "p99_bounded_slowdown", "share_jct_over_2x_fifo", "share_jct_over_10x_fifo",
            "max_wait_over_fifo", "p99_wait_over_fifo", "overdue"}  # fmt: skip
    assert all(set(p) == keys for p in curve)
    assert all(math.isfinite(p["avg_jct_s"]) for p in curve)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--wait-bound-curve", "--open-loop"], "needs the closed loop"),
        (["--wait-bound-curve", "2,fast"], "--wait-bound-curve: expected factors"),
    ],
)
def test_cli_says_what_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    rc, _, err = _cli(capsys, "--no-plot", *argv)
    assert rc == 2 and said in err and "Traceback" not in err
