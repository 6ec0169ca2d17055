"""``gpuhint slurm`` user errors and the SuspendProgram/ResumeProgram wrapper (no Slurm)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GH = [sys.executable, "-m", "gpuhint", "slurm"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GH, *args], capture_output=True, text=True, timeout=60)


def test_power_wrapper_runs_the_command_per_node(tmp_path: Path) -> None:
    log = tmp_path / "power.log"
    out = tmp_path / "seen"
    cmd = f"sh -c 'echo {{node}} >> {out}'"
    r = _run("power", "suspend", "gpu[01-03]", "--command", cmd, "--log", str(log))
    assert r.returncode == 0, r.stderr
    assert sorted(out.read_text().split()) == ["gpu01", "gpu02", "gpu03"]  # side by side
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


def test_daemon_started_while_slurmctld_is_down_keeps_retrying(tmp_path: Path) -> None:
    """Exit 2 means "bad configuration" to the systemd units (RestartPreventExitStatus=2):
    an applier started while slurmctld is down (a reboot, a controller restart) must
    retry, not exit 2 and stay dead. With --once it still fails at once."""
    import os
    import signal
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("scontrol", "squeue", "sprio", "sinfo"):
        fake = bin_dir / tool
        fake.write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
        fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GPUHINT_CLUSTER": "c",
        "GPUHINT_REDIS_URL": "redis://127.0.0.1:9/0",  # nothing listens: Redis down too
    }
    for action in ("apply-priorities", "apply-power"):
        r = subprocess.run([*GH, action, "--once"], capture_output=True, text=True, env=env,
                           timeout=60)  # fmt: skip
        assert r.returncode == 2 and "Slurm does not answer" in r.stderr, r.stderr
        proc = subprocess.Popen([*GH, action], stderr=subprocess.PIPE, text=True, env=env)
        try:
            time.sleep(4.0)
            assert proc.poll() is None, f"{action} exited {proc.returncode}: {proc.stderr}"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Slurm does not answer" in err, err


def test_power_wrapper_runs_the_nodes_side_by_side(tmp_path: Path) -> None:
    """Slurm hands ResumeProgram the whole host list at once and counts ResumeTimeout
    for every node from then: one node's slow power command (a cloud CLI that waits
    for its operation) must not delay the next node's boot by its whole length."""
    import time

    log = tmp_path / "power.log"
    t0 = time.monotonic()
    r = _run("power", "resume", "gpu[01-06]", "--command", "sh -c 'sleep 2' {node}", "--log",
             str(log))  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    lines = log.read_text().splitlines()
    assert sorted(ln.split()[2] for ln in lines) == [f"gpu0{i}:" for i in range(1, 7)]
    assert all("rc=0" in ln for ln in lines)
    assert took < 8.0, took  # one after the other: 12 s and more


def test_the_power_daemon_survives_a_failed_pass_of_any_kind(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass that fails in a way not foreseen (here fork() refused: OSError; or a bug)
    is logged with its traceback, recorded for `gpuhint status` and retried, as
    apply-priorities does: not a traceback exit that loses the resume watch (failed
    nodes, nodes waking) and leaves the status record saying the last pass was fine."""
    import json
    import signal

    from gpuhint.cli import main
    from gpuhint.cli import slurm as cli_slurm
    from gpuhint.slurm.power import PowerResult

    class Records(list[dict[str, Any]]):
        def set(self, key: str, value: str, ex: int | None = None) -> None:
            self.append(json.loads(value))

    class Client:
        r = Records()

        def close(self) -> None:
            pass

    class Applier:
        total_refused, passes = 0, 0

        def run_pass(self, now: float) -> PowerResult:
            self.passes += 1
            if self.passes == 1:
                raise BlockingIOError(11, "Resource temporarily unavailable")
            signal.raise_signal(signal.SIGTERM)
            return PowerResult(target_on=1, on=1, busy=0, powered_down=[], powered_up=[],
                               refused=0, advice_age_s=None)  # fmt: skip

    monkeypatch.setattr(cli_slurm, "_check_slurm", lambda cli, once: None)
    monkeypatch.setattr(cli_slurm, "_client", lambda settings: Client())
    monkeypatch.setattr(cli_slurm, "_power_applier", lambda *a: Applier())
    monkeypatch.setattr(cli_slurm.time, "sleep", lambda s: None)
    assert main(["slurm", "apply-power", "--cluster", "c", "--interval", "0.01"]) == 0
    assert [rec["ok"] for rec in Client.r] == [False, True]
    assert "Resource temporarily unavailable" in caplog.text
