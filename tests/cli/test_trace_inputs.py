"""Every command that reads a job trace: a bad trace is ``file:line: reason`` (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.cli import main

VENUS = Path(__file__).resolve().parents[1] / "data" / "venus_qssf_300.csv"

COMMANDS = {
    "evaluate qssf": ["evaluate", "qssf", "--no-plot"],
    "evaluate ces": ["evaluate", "ces", "--no-plot", "--no-frontier"],
    "demo": ["demo"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_repeated_job_id_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """The simulations run the service's core, which takes a repeated id for a resend
    and drops the job: a silently wrong result before (or, when the first job still
    waits, an AssertionError traceback in evaluate qssf, demo and analyze)."""
    lines = VENUS.read_text().splitlines()
    dup = lines[1].split(",")[0]
    row = lines[5].split(",")
    row[0] = dup
    lines[5] = ",".join(row)
    p = tmp_path / "dups.csv"
    p.write_text("\n".join(lines) + "\n")
    argv = [*COMMANDS[command], "--trace", str(p), "--no-progress", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"dups.csv:6: job id {dup!r} already at line 2" in err and "Traceback" not in err
    assert main([*argv, "--on-error", "skip"]) == 0
    err = capsys.readouterr().err
    assert f"skipped {p}:6: job id {dup!r}" in err
