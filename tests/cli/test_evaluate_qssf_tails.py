"""``gpuhint evaluate qssf``'s text output: the tails table and the band coverage lines."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuhint.cli import main
from gpuhint.cli.evaluate_qssf_text import _print_curve
from gpuhint.lab.evaluation.qssf_curve import BoundPoint
from models.simulator.metrics import Tails

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
VENUS = DATA / "venus_qssf_300.csv"
VCS = DATA / "venus_qssf_vc_config.csv"


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(["evaluate", "qssf", "--trace", str(VENUS), "--vc-config", str(VCS), *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def _tails_rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    head = next(
        k for k, line in enumerate(lines) if line.startswith("policy") and "max wait" in line
    )
    assert set(lines[head + 1]) == {"-"}
    rows: dict[str, list[str]] = {}
    for line in lines[head + 2 :]:
        if not line.strip() or line.startswith("QSSF hints"):
            break
        name, *cells = re.split(r"\s{2,}", line.strip())
        rows[name] = cells
    return rows


def test_tails_table_has_labelled_columns_and_human_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _text(capsys, "--no-plot")
    assert "tails (waits in hours" in out
    header = next(line for line in out.splitlines() if "max wait" in line)
    for label in ("max wait", "p99 wait", "p99 bsld", ">2x FIFO", ">10x FIFO"):
        assert label in header
    rows = _tails_rows(out)
    assert set(rows) == {"fifo", "sjf", "srtf", "qssf-oracle", "qssf"}
    for name, cells in rows.items():
        assert len(cells) == 5, (name, cells)
        max_wait, p99_wait, bsld, over2, over10 = cells
        assert re.fullmatch(r"[\d,]+\.\d+ h", max_wait), max_wait
        assert re.fullmatch(r"[\d,]+\.\d+ h", p99_wait), p99_wait
        assert re.fullmatch(r"[\d,]+\.\d", bsld), bsld
        assert re.fullmatch(r"(<0\.1|\d+\.\d)%", over2), over2
        assert re.fullmatch(r"(<0\.1|\d+\.\d)%", over10), over10
    assert rows["fifo"][3:] == ["0.0%", "0.0%"]
    # the table stays readable: no line of it is wider than the JCT table above
    widths = [len(line) for line in out.splitlines() if "max wait" in line or "avg JCT s" in line]
    assert widths[1] <= widths[0]


def test_text_reports_band_coverage_of_the_qssf_hints(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(capsys, "--no-plot")
    assert "QSSF hints as written at submit" in out
    m = re.search(r"inside the 80% band \(p10\.\.p90\): (\d+\.\d)% of 300 jobs", out)
    assert m and 0 < float(m.group(1)) < 100
    assert re.search(r"off by 2x or more: \d+\.\d% \(point forecast\), \d+\.\d%", out)


def test_tails_rows_follow_the_policies_with_backfill(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _tails_rows(_text(capsys, "--no-plot", "--backfill"))
    assert "fifo+backfill" in rows and "srtf+backfill" not in rows


def test_text_reports_the_expected_starts_beside_exact_limits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _text(capsys, "--no-plot")
    m = re.search(
        r"expected starts \(first forecast of ([\d,]+) of the ([\d,]+) jobs that waited "
        r">= 1 min\): median \|error\| (\d+\.\d)% of the wait, inside the 80% band (\d+\.\d)%",
        out,
    )
    assert m, out
    assert int(m.group(1).replace(",", "")) <= int(m.group(2).replace(",", ""))
    assert re.search(r"squeue --start with exact limits \(the true durations, no arrivals\): ", out)
    assert "on the requested limits" not in out  # this trace has no limits


# --wait-bound-curve's table (review 2026-12-08) ------------------------------------
FIFO = Tails(100.0, 50.0, 3.0, 0.0, 0.0)


def _rows(capsys: pytest.CaptureFixture[str], own: float, factors: list[float]) -> list[str]:
    pts = [BoundPoint(f, 1000.0 + f, Tails(100.0, 50.0, 3.0, 0.0, 0.0), 1, FIFO) for f in factors]
    _print_curve(SimpleNamespace(wait_bound_curve=pts, wait_bound=own))
    return capsys.readouterr().out.splitlines()[2:]


@pytest.mark.parametrize("own", [0.25, 1.25, 1000.0])
def test_curve_rows_stay_aligned_with_the_run_marker(
    capsys: pytest.CaptureFixture[str], own: float
) -> None:
    """`--wait-bound 0.25 --wait-bound-curve`: '0.25 (this run)' is 15 characters in a
    14-wide column, so that row's columns shift one to the right."""
    lines = _rows(capsys, own, [0.0, 1.0, own])
    assert len({len(line) for line in lines}) == 1, "\n".join(lines)


def test_the_off_row_says_this_run_when_the_run_has_the_bound_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--wait-bound 0 --wait-bound-curve`: every other own factor is marked '(this run)'."""
    lines = _rows(capsys, 0.0, [0.0, 1.0, 2.0])
    assert any("this run" in line for line in lines), "\n".join(lines)
