"""``gpuhint analyze`` end to end on small real excerpts: files, JSON keys, skips, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
VENUS = DATA / "venus_qssf_300.csv"
PHILLY = DATA / "philly_excerpt.json"
ITP = DATA / "itp_cluster01_400.csv"
SERIES = DATA / "earth_8vcs_nodes_2020-05-20_3days.csv.gz"

ALL_FIGURES = {
    "duration",
    "gpu_demand",
    "states",
    "queue",
    "submissions",
    "users",
    "repetition",
    "vcs",
    "qssf",
}
TOP_KEYS = {
    "schema_version",
    "trace",
    "format",
    "rows",
    "rows_skipped",
    "created",
    "fields",
    "overview",
    "helios_summary",
    "duration",
    "gpu_demand",
    "states",
    "queue",
    "submissions",
    "users",
    "repetition",
    "vcs",
    "time_limits",
    "gpuhint",
    "skipped",
    "figures",
    "seconds",
    "trace_checks",
    "actions",
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["analyze", *argv, "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def _check_outputs(out_dir: Path, numbers: dict) -> None:  # type: ignore[type-arg]
    assert (out_dir / "report.html").stat().st_size > 10_000
    assert json.loads((out_dir / "analysis.json").read_text()) == numbers
    for name in numbers["figures"].values():
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


@pytest.mark.parametrize(
    ("trace", "missing"),
    [(VENUS, {"queue"}), (PHILLY, set())],
    ids=["helios", "philly"],
)
def test_every_figure_on_real_excerpts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: Path, missing: set[str]
) -> None:
    rc, out, _ = _run(capsys, str(trace), "-o", str(tmp_path), "--json")
    assert rc == 0
    n = json.loads(out)
    assert set(n) == TOP_KEYS
    assert set(n["figures"]) == ALL_FIGURES - missing
    assert set(n["skipped"]) == missing | {"time_limits"}
    _check_outputs(tmp_path, n)
    q = n["gpuhint"]["qssf"]
    assert q["window"] == "whole trace"
    assert {"fifo", "qssf", "qssf-oracle"} <= set(q["avg_jct_s"])
    assert q["jct_ratio_qssf_over_oracle"] == pytest.approx(
        q["avg_jct_s"]["qssf"] / q["avg_jct_s"]["qssf-oracle"]
    )
    # the same simulation with hints that never saw a user or a job name
    blind = q["without_users"]
    assert blind["avg_jct_s"] > 0
    assert blind["jct_ratio_qssf_over_oracle"] == pytest.approx(
        blind["avg_jct_s"] / q["avg_jct_s"]["qssf-oracle"]
    )
    assert n["gpuhint"]["ces"] is None and "--series" in n["gpuhint"]["ces_note"]
    # the tails the QSSF action is judged on, and the CES estimate from the jobs
    assert q["tails"]["qssf"]["max_wait_s"] >= 0 and "share_jct_over_2x_fifo" in q["tails"]["fifo"]
    cj = n["gpuhint"]["ces_jobs"]
    assert cj["nodes"] >= 1 and cj["idle_timer"]["setting"] == 3600
    assert cj["all_on_energy_kwh"] > 0
    acts = n["actions"]
    assert len(acts) == 2 and all(set(a) == {"action", "why", "knob"} for a in acts)
    assert "QSSF" in acts[0]["action"] and acts[0]["knob"]
    assert "kWh" in acts[1]["why"]


def test_trace_without_optional_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ITP: no user, name, state, start time or VC; the rest is still produced."""
    rc, out, err = _run(capsys, str(ITP), "-o", str(tmp_path))
    assert rc == 0, err
    assert "skipped" in out and "no users" in out
    n = json.loads((tmp_path / "analysis.json").read_text())
    assert set(n["figures"]) == {"duration", "gpu_demand", "submissions", "qssf"}
    assert set(n["skipped"]) == {"states", "queue", "users", "repetition", "vcs", "time_limits"}
    for key in n["skipped"]:
        assert n[key] is None
    assert n["submissions"]["clock"] == "hours since the first submit"
    assert n["submissions"]["by_weekday"] is None
    assert n["helios_summary"]["complete_rate_gpu"] is None
    assert n["gpuhint"]["qssf"]["without_users"] is None  # nothing to hide
    notes = " ".join(n["gpuhint"]["notes"])
    assert "no users" in notes and "no job names" in notes
    html = (tmp_path / "report.html").read_text()
    assert "Skipped, the trace lacks what they need" in html
    assert "Queueing delay (the trace has no start times)" in html
    assert "The trace records no users" in html  # said in the headline too
    assert "paper: Venus" in html  # the anchors beside the trace's own figures
    _check_outputs(tmp_path, n)


def test_time_limit_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace with requested time limits (as Slurm records them) gets their section.

    The ITP excerpt's real jobs, given a made-up limit: their run time rounded up to
    whole hours, doubled.
    """
    lines = ITP.read_text().splitlines()
    rows = [lines[0] + ",time_limit"]
    for line in lines[1:]:
        duration = float(line.split(",")[2])
        rows.append(f"{line},{2 * 3600 * (int(duration // 3600) + 1)}")
    trace = tmp_path / "limits.csv"
    trace.write_text("\n".join(rows) + "\n")
    rc, out, err = _run(capsys, str(trace), "-o", str(tmp_path / "r"), "--no-qssf", "--json")
    assert rc == 0, err
    n = json.loads(out)
    t = n["time_limits"]
    assert t["jobs"] == 400
    assert 0 < t["median_used_share"] < 0.5  # every job uses at most half its limit
    assert t["under_half_share"] == 1.0 and t["at_limit_share"] == 0.0
    assert n["figures"]["time_limits"] == "time_limits.png"
    assert "time_limits" not in n["skipped"]


def test_ces_summary_and_qssf_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(
        capsys,
        str(PHILLY),
        "-o",
        str(tmp_path),
        "--series",
        str(SERIES),
        "--ces-test-days",
        "1",
        "--qssf-jobs",
        "200",
    )
    assert rc == 0, err
    n = json.loads((tmp_path / "analysis.json").read_text())
    c = n["gpuhint"]["ces"]
    assert c["total_nodes"] == 47
    assert 0 < c["util_before"] <= c["util_after"] <= 1
    assert n["figures"]["ces"] == "ces_load.png"
    q = n["gpuhint"]["qssf"]
    assert q["jobs"] == 200 and q["window"] == "latest 200 jobs"
    assert "CES (" in out and "QSSF (latest 200 jobs)" in out


def test_no_qssf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, str(VENUS), "-o", str(tmp_path), "--no-qssf", "--json")
    assert rc == 0
    n = json.loads(out)
    assert n["gpuhint"]["qssf"] is None and "qssf" not in n["figures"]
    assert n["gpuhint"]["ces_jobs"]["jobs"] > 0  # CES from the jobs still runs
    assert n["actions"][0]["action"] == "Measure QSSF before enabling it"
    rc, out, _ = _run(capsys, str(VENUS), "-o", str(tmp_path), "--no-qssf", "--no-ces")
    assert rc == 0
    assert "actions:\n  1. Measure QSSF" in out and "  2. Measure node power saving" in out
    n = json.loads((tmp_path / "analysis.json").read_text())
    assert n["gpuhint"]["ces_jobs"] is None and "--no-ces" in n["gpuhint"]["ces_jobs_note"]


def test_trace_oddities_are_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Venus excerpt, its submissions moved into 00:00-12:00 and one id repeated."""
    from gpuhint.lab.traces.readers import read_trace

    jobs = read_trace(VENUS).jobs
    day0 = jobs[0].submit_time - jobs[0].submit_time % 86400
    rows = ["job_id,submission_time,duration,num_gpu"]
    for k, j in enumerate(jobs):
        t = day0 + (j.submit_time - day0) // 86400 * 86400 + (j.submit_time % 43200)
        rows.append(f"{'dup' if k < 2 else j.job_id},{t:.0f},{j.duration:.0f},{j.num_gpus}")
    trace = tmp_path / "morning.csv"
    trace.write_text("\n".join(rows) + "\n")
    rc, out, err = _run(capsys, str(trace), "-o", str(tmp_path / "r"), "--no-qssf", "--no-ces")
    assert rc == 0, err
    assert "warning: Every submission falls between 00:00 and 12:00" in out
    assert "warning: 1 job id(s) occur more than once (2 rows)" in out
    n = json.loads((tmp_path / "r" / "analysis.json").read_text())
    assert {c["check"] for c in n["trace_checks"]} >= {"hour_window", "duplicate_ids"}
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Check the trace first" in html and "between 00:00 and 12:00" in html


def test_progress_lines_while_a_step_runs() -> None:
    from gpuhint.cli.analyze import Steps

    now = [0.0]
    said: list[str] = []
    steps = Steps(quiet=True, every_s=5, clock=lambda: now[0], out=said.append)
    steps.say("QSSF simulation")
    now[0] = 4.0
    steps.tick()
    steps.say("  simulated fifo")  # a line about the step: the step goes on
    now[0] = 9.5
    steps.tick()
    now[0] = 12.0
    steps.tick()  # said 2.5 s ago: nothing
    now[0] = 15.0
    steps.tick()
    assert said == [
        "QSSF simulation",
        "  simulated fifo",
        "  ... still QSSF simulation (10 s)",
        "  ... still QSSF simulation (15 s)",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "nope.csv: no such file"),
        ("job_id,x\n1,2\n", "unknown trace format"),
        ("job_id,submission_time,duration,num_gpu\na,0,ten,1\n", "t.csv:2: duration is not"),
        ("job_id,submission_time,duration,num_gpu\n", "no usable jobs"),
        # rows the wire contract refuses (review, 2026-12-07: pydantic's text, or an
        # int32 overflow in the frame)
        ("job_id,submission_time,duration,num_gpu\na,0,10,70000\n", "t.csv:2: num_gpus 70000"),
        ("job_id,submission_time,duration,num_gpu\na,0,10,1e12\n", "t.csv:2: num_gpus"),
    ],
)
def test_bad_input_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    p = tmp_path / ("nope.csv" if content is None else "t.csv")
    if content is not None:
        p.write_text(content)
    rc, _, err = _run(capsys, str(p), "-o", str(tmp_path / "out"))
    assert rc == 2
    assert message in err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(("gpuhint analyze: error", "  (use"))


def test_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, str(VENUS), "--qssf-jobs", "0")
    assert rc == 2 and "--qssf-jobs must be >= 1" in err
    rc, _, err = _run(capsys, str(VENUS), "--series", str(tmp_path / "none.csv"))
    assert rc == 2 and "none.csv: no such file (--series)" in err
    rc, _, err = _run(capsys, str(VENUS), "--ces-test-from", "2020-01-01")
    assert rc == 2 and "--ces-test-from / --ces-test-to need --series" in err
    rc, _, err = _run(capsys, str(VENUS), "--series", str(SERIES), "--ces-test-to", "May 3")
    assert rc == 2 and "--ces-test-to: not a date (YYYY-MM-DD): 'May 3'" in err
    bad = tmp_path / "vc.csv"
    bad.write_text("vc,nodes\nvcA,many\n")
    rc, _, err = _run(capsys, str(VENUS), "--vc-config", str(bad))
    assert rc == 2 and "vc.csv:2: nodes must be a whole number" in err


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("report.html", "analysis.json", "--series", "examples:", "--on-error skip"):
        assert word in out


SAMPLES = {
    "helios": VENUS,
    "philly": PHILLY,
    "plain": ITP,
    "sacct": DATA / "slurm" / "sacct_parsable.txt",  # made-up jobs in sacct's real shapes
    "sacct-json": DATA / "slurm" / "sacct.json",
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_every_trace_format(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """Each format of gpuhint's trace readers (detected from the file, and forced)."""
    from typing import get_args

    from gpuhint.lab.traces.readers import TraceFormat, detect_format, read_trace

    assert fmt in get_args(TraceFormat)
    sample = SAMPLES[fmt]
    assert detect_format(sample) == fmt
    rc, out, err = _run(
        capsys, str(sample), "-o", str(tmp_path), "--no-qssf", "--json", "--format", fmt
    )
    assert rc == 0, err
    n = json.loads(out)
    assert n["format"] == fmt
    assert n["rows"] == len(read_trace(sample).jobs)
    assert "duration" in n["figures"]


def test_jobs_that_all_ran_zero_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No ratio to FIFO or the oracle exists: the summary says ``-``, no crash (review)."""
    p = tmp_path / "zero.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\n1,0,0,1\n2,0,0,1\n")
    rc, out, err = _run(capsys, str(p), "-o", str(tmp_path / "out"))
    assert rc == 0, err
    assert "- the oracle" in out


def test_default_folders_of_two_dated_traces_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jobs.2020.csv`` and ``jobs.2021.csv`` must not share ``analyze-jobs/`` (the second
    run would overwrite the first's report)."""
    import gzip

    monkeypatch.chdir(tmp_path)
    for name in ("jobs.2020.csv", "jobs.2021.csv"):
        (tmp_path / name).write_bytes(VENUS.read_bytes())
    (tmp_path / "big.csv.gz").write_bytes(gzip.compress(VENUS.read_bytes()))
    for name in ("jobs.2020.csv", "jobs.2021.csv", "big.csv.gz"):
        rc, _, err = _run(capsys, name, "--no-qssf", "--no-ces")
        assert rc == 0, err
    made = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert made == ["analyze-big", "analyze-jobs.2020", "analyze-jobs.2021"]


def test_unreadable_traces_say_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As every other command that reads a trace: a byte that is not UTF-8 is named by
    ``file:line`` (no line before), and a pipe is no trace ("no such file" before)."""
    import os

    p = tmp_path / "latin1.csv"
    p.write_bytes(b"job_id,submission_time,duration,num_gpu\n1,0,10,1\n2,5,10,1\n3,caf\xe9,1,1\n")
    rc, _, err = _run(capsys, str(p), "-o", str(tmp_path / "out"))
    assert rc == 2 and f"{p}:4: not UTF-8 text" in err and "Traceback" not in err
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    rc, _, err = _run(capsys, str(fifo), "-o", str(tmp_path / "out"))
    assert rc == 2 and "pipe.csv: not a regular file" in err


def test_left_out_jobs_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An sacct export's running and pending jobs are no history: analyze says so."""
    rc, _, err = _run(capsys, str(SAMPLES["sacct"]), "-o", str(tmp_path / "o"), "--no-qssf")
    assert rc == 0 and "left out 2 jobs: pending or running (no history yet)" in err


def test_repeated_job_ids_are_warned_and_simulated_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Repeated ids are a trace check here, not bad rows; the simulations (the service's
    core, which drops a repeated id as a resend) get the first job of each id: an
    AssertionError traceback before."""
    lines = VENUS.read_text().splitlines()
    rows = [line.split(",", 1) for line in lines[1:]]
    p = tmp_path / "dups.csv"
    p.write_text(lines[0] + "\n" + "".join(f"j{k % 20},{r[1]}\n" for k, r in enumerate(rows)))
    rc, out, err = _run(capsys, str(p), "-o", str(tmp_path / "o"), "--json", "--no-ces")
    assert rc == 0, err
    assert f"QSSF and CES simulations: left out {len(rows) - 20} jobs whose id" in err
    numbers = json.loads(out)
    assert "duplicate_ids" in {c["check"] for c in numbers["trace_checks"]}
    assert numbers["rows"] == len(rows)


def test_no_skip_hint_when_skipping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An error of the file itself stops a run with --on-error skip too: the hint to use
    --on-error skip (which the run did) is not given, as in the other commands."""
    p = tmp_path / "two.json"
    p.write_text(PHILLY.read_text() + "\n[]\n")
    rc, _, err = _run(capsys, str(p), "-o", str(tmp_path / "o"), "--on-error", "skip")
    assert rc == 2 and "unexpected text after the JSON array" in err
    assert "use --on-error skip" not in err


def test_no_usable_jobs_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every row bad under --on-error skip: the rows skipped and why, not only "no
    usable jobs" (as the other commands say it)."""
    p = tmp_path / "bad.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,ten,1\nb,5,-1,1\n")
    rc, _, err = _run(capsys, str(p), "-o", str(tmp_path / "o"), "--on-error", "skip")
    assert rc == 2 and "no usable jobs" in err
    assert f"skipped {p}:2: duration is not a number" in err and f"skipped {p}:3:" in err
