"""One CLI convention: bare ``gpuhint`` is help, the trace is ``--trace`` everywhere (the
old positional form still works), ``--no-progress`` wherever there is progress."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpuhint.cli import build_parser, main

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sub
                out.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return out


def test_bare_gpuhint_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: gpuhint" in out and "gpuhint status" in out


def test_every_command_that_reads_a_trace_takes_trace_flag() -> None:
    commands = _subparsers(build_parser())
    readers = {"analyze", "replay", "demo", "evaluate qssf", "evaluate slurm"}
    for name in readers:
        flags = {s for a in commands[name]._actions for s in a.option_strings}
        assert "--trace" in flags, name


@pytest.mark.parametrize("form", ["flag", "positional"])
def test_analyze_takes_both_spellings(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = ["--trace", str(TRACE)] if form == "flag" else [str(TRACE)]
    args = ["analyze", *trace, "--no-qssf", "--no-progress", "-o", str(tmp_path / "out")]
    assert main(args) == 0
    assert (tmp_path / "out" / "analysis.json").is_file()


def test_a_missing_or_doubled_trace_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze"]) == 2
    assert "give --trace FILE" in capsys.readouterr().err
    assert main(["replay", "a.csv", "--trace", "b.csv"]) == 2
    assert "two traces given" in capsys.readouterr().err


def test_commands_with_progress_take_no_progress() -> None:
    commands = _subparsers(build_parser())
    for name in ("analyze", "replay", "evaluate qssf"):
        flags = {s for a in commands[name]._actions for s in a.option_strings}
        assert "--no-progress" in flags, name


def test_evaluate_qssf_no_progress_is_silent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = TRACE.parent / "venus_qssf_300.csv"
    base = ["evaluate", "qssf", "--trace", str(data), "--no-plot", "--json"]
    assert main(base) == 0
    assert "reading" in capsys.readouterr().err
    assert main([*base, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
