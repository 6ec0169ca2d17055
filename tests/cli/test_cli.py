"""The console script as a user meets it: help, the demo, and user mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuhint.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("replay", "worker", "demo", "evaluate", "agent"):
        assert cmd in out


def test_demo_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["jobs"] == 1867 and out["rows_skipped"] == 0
    assert out["hints_written"] > 1000
    assert out["hints_written"] >= out["hints_pending"] >= 0
    assert out["learned"] > 1000 and 0 < out["mae_log"] < 10
    assert out["events_replayed"] <= 3 * out["jobs"]


def test_demo_on_the_shipped_philly_excerpt_leaves_a_real_queue(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--trace", "philly", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "philly" and out["jobs"] == 418
    assert out["hints_pending"] > 0  # jobs submitted before the cut, started after it


def test_demo_text_shows_what_a_user_wants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for word in ("events replayed", "hints", "prediction error", "throughput"):
        assert word in out


def test_bad_trace_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\na,1,2,3\nb,x,2,3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "demo", "--trace", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert f"{bad}:3: submission_time is not a number" in proc.stderr
    assert "Traceback" not in proc.stderr
    skipped = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuhint",
            "demo",
            "--trace",
            str(bad),
            "--on-error",
            "skip",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["rows_skipped"] == 1
    assert f"skipped {bad}:3" in skipped.stderr


def test_missing_trace_and_bad_config_are_user_errors(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "demo", "--trace", str(tmp_path / "nope.csv")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "no such file" in proc.stderr
    env = dict(os.environ, GPUHINT_PARTITIONS="many")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "replay", str(REPO / "tests/data/philly_excerpt.json")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert "partitions" in proc.stderr and "Traceback" not in proc.stderr


def test_replay_without_a_broker_says_so(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuhint",
            "replay",
            str(REPO / "tests/data/philly_excerpt.json"),
            "--bootstrap",
            f"127.0.0.1:{port}",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, GPUHINT_KAFKA_RETRY_S="3", GPUHINT_STATE_DIR=str(tmp_path)),
    )
    assert proc.returncode == 2
    assert f"127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr
    assert "0 of " in proc.stderr and "--resume" in proc.stderr  # retried, then said how far


def test_demo_works_from_a_clean_install(tmp_path: Path) -> None:
    """Build the wheel, install it alone into an empty directory, run the demo from elsewhere.

    This catches what only a real install shows: the shipped trace excerpt missing from the
    wheel, the console script, or code that reads files relative to the repository.
    """
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(REPO),
        ],
        check=True,
    )
    (wheel,) = wheel_dir.glob("gpuhint-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"gpuhint/data/venus_sept_2vc.csv", "gpuhint/data/philly_excerpt.json"} <= set(names)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    probe = subprocess.run(
        [sys.executable, "-c", "import gpuhint; print(gpuhint.__file__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip().startswith(str(target))  # the installed copy, not the repo
    proc = subprocess.run(
        [str(target / "bin" / "gpuhint"), "demo", "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["jobs"] == 1867 and out["hints_written"] > 0


def test_demo_closes_with_fifo_qssf_oracle_and_a_queue(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from gpuhint.cli.demo import shipped_trace
    from gpuhint.lab.evaluation.qssf import evaluate_qssf
    from gpuhint.lab.traces.readers import read_trace

    assert main(["demo", "--json"]) == 0
    sched = json.loads(capsys.readouterr().out)["schedule"]
    # one VC-sizing rule: the VCs evaluate qssf (and so analyze) simulates, by default
    rep = evaluate_qssf(read_trace(shipped_trace("venus")).jobs, model="history_mix")
    assert sched["vc_sizes"] == rep.vc_sizes and sched["vc_sizing"] == rep.vc_sizing
    assert set(sched["vc_sizing"].values()) == {"sized to load 0.9"}
    assert sched["qssf_avg_jct_s"] < sched["fifo_avg_jct_s"]
    assert sched["oracle_avg_jct_s"] > 0 and sched["hint_updates"] >= 0
    assert sum(sched["queue_lengths"].values()) > 0
    assert main(["demo", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "FIFO" in out and "QSSF with gpuhint hints" in out and "QSSF oracle" in out
    assert "waiting; run first" in out
    assert "sized to load 0.9, models/simulator/sizing.py" in out  # the rule beside the figure
    cfg = tmp_path / "vc.csv"
    cfg.write_text("vc,nodes\nvcvGl,20\nvcvlY,2\n")  # the artifact's real sizes
    assert main(["demo", "--json", "--vc-config", str(cfg)]) == 0
    sched = json.loads(capsys.readouterr().out)["schedule"]
    assert sched["vc_sizes"] == {"vcvGl": 20, "vcvlY": 2}
    assert set(sched["vc_sizing"].values()) == {"given"}
    assert main(["demo", "--target-load", "0"]) == 2


def _strict_json(text: str) -> object:
    """Parse as a strict reader would: NaN and Infinity are not JSON."""

    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


SACCT_ONE_FINISHED = (
    "JobID|JobName|User|Partition|State|Submit|Start|End|NNodes|NCPUS|AllocTRES|ReqTRES|NodeList\n"
    "2002|eval|bob|vcB|CANCELLED by 1001|1717000020|1717000030|1717000090|2|32|"
    "billing=32,cpu=32,gres/gpu:v100=8,node=2|billing=32,cpu=32,gres/gpu=8,node=2|gpu[02-03]\n"
)


def test_demo_json_is_strict_json_and_zero_second_jobs_do_not_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: a VC with no queue printed ``NaN`` (strict parsers refuse
    it), and a trace whose jobs all ran 0 s divided by zero."""
    one = tmp_path / "one.sacct"
    one.write_text(SACCT_ONE_FINISHED)
    assert main(["demo", "--no-progress", "--trace", str(one), "--json"]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert isinstance(doc, dict)
    zero = tmp_path / "zero.csv"
    zero.write_text("job_id,submission_time,duration,num_gpu\n1,0,0,1\n2,0,0,1\n")
    assert main(["demo", "--no-progress", "--trace", str(zero), "--json"]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert isinstance(doc, dict) and doc["schedule"]["jct_ratio_qssf_over_fifo"] is None
    assert main(["demo", "--no-progress", "--trace", str(zero)]) == 0
    assert "- the oracle" in capsys.readouterr().out


def test_a_row_the_contract_refuses_is_a_file_line_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "big.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\na,1,2,3\nb,5,2,70000\nc,9,2,1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "demo", "--no-progress", "--trace", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{bad}:3: num_gpus 70000: " in proc.stderr
    skip = [sys.executable, "-m", "gpuhint", "demo", "--trace", str(bad), "--on-error", "skip"]
    proc = subprocess.run([*skip, "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows_skipped"] == 1
    every_bad = tmp_path / "allbad.csv"
    every_bad.write_text("job_id,submission_time,duration,num_gpu\na,1,2,x\nb,5,2,y\n")
    proc = subprocess.run([*skip[:5], str(every_bad), *skip[6:]], capture_output=True, text=True)
    assert proc.returncode == 2 and "no usable jobs" in proc.stderr
    assert f"skipped {every_bad}:2: " in proc.stderr  # the reasons, not only the verdict


def test_a_non_utf8_line_and_a_device_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review, 2026-12-07: a byte offset in a decoder's chunk, and "no such file" for
    /dev/null, told the user nothing."""
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"job_id,submission_time,duration,num_gpu\na,1,2,3\n\xff\xfe,1,2,3\n")
    assert main(["demo", "--no-progress", "--trace", str(latin)]) == 2
    assert f"{latin}:3: not UTF-8 text" in capsys.readouterr().err
    assert main(["demo", "--no-progress", "--trace", "/dev/null"]) == 2
    assert "/dev/null: not a regular file" in capsys.readouterr().err
    assert main(["replay", "--trace", str(latin), "--speed", "nan"]) == 2
    assert "--speed nan: must be a finite number > 0" in capsys.readouterr().err
