"""``gpuhint slurm`` user errors and the SuspendProgram/ResumeProgram wrapper (no Slurm)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GH = [sys.executable, "-m", "gpuhint", "slurm"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GH, *args], capture_output=True, text=True, timeout=60)


def test_power_wrapper_runs_the_command_per_node(tmp_path: Path) -> None:
    log = tmp_path / "power.log"
    out = tmp_path / "seen"
    cmd = f"sh -c 'echo {{node}} >> {out}'"
    r = _run("power", "suspend", "gpu[01-03]", "--command", cmd, "--log", str(log))
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["gpu01", "gpu02", "gpu03"]
    assert log.read_text().count("suspend gpu0") == 3
    bad = _run("power", "resume", "gpu01", "--command", "false {node}", "--log", str(log))
    assert bad.returncode == 1 and "resume gpu01: rc=1" in log.read_text()


def test_user_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    r = _run("power", "resume", "gpu01", "--command", "true")
    assert r.returncode == 2 and "must contain {node}" in r.stderr
    assert r.stderr.startswith("gpuhint slurm: error:")  # not the command as the program
    r = _run("power", "suspend", "gpu[01-", "--command", "echo {node}")
    assert r.returncode == 2 and "not a Slurm host list" in r.stderr  # not run on 'gpu[01-'
    r = _run(
        "power", "resume", "gpu01", "--command", "echo {node}", "--log", str(tmp_path / "no/x")
    )
    assert r.returncode == 2 and "cannot open the log" in r.stderr and "Traceback" not in r.stderr
    # a bad value names the flag the user typed, not a field name with "-s" (review)
    r = _run("apply-power", "--once", "--max-age", "-3")
    assert r.returncode == 2 and "error: --max-age -3.0: " in r.stderr, r.stderr
    r = _run("apply-priorities", "--once", "--slurm-conf", str(tmp_path / "nope.conf"))
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [*GH, "apply-priorities", "--once", "--max-factor", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "--max-factor 0: " in r.stderr
    env = {**__import__("os").environ, "GPUHINT_SLURM_MAX_FACTOR": "0"}
    r = subprocess.run([*GH, "apply-priorities", "--once"], capture_output=True, text=True,
                       timeout=60, env=env)  # fmt: skip
    assert r.returncode == 2 and "GPUHINT_SLURM_MAX_FACTOR" in r.stderr  # set in the env
