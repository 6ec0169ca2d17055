"""Look at and tidy a running Slurm cluster by its ``slurm.conf``: for tests that share one.

Tests that share a cluster must leave it as they found it (no jobs, every node idle and
powered up), or one failure makes the next test fail for an unrelated reason. And a
failure needs the cluster's own account of itself: each job's state and pending reason,
each node's state, the power log.

    >>> from gpuhint.lab.local.slurm_tidy import describe
    >>> print(describe("/x/etc/slurm.conf"))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def _run(conf: str, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": conf}
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({' '.join(argv)}: {exc})"
    return proc.stdout + (proc.stderr if proc.returncode else "")


def _tail(path: Path, n: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def describe(conf: str, log_lines: int = 15) -> str:
    """The cluster's jobs (with pending reasons), nodes and, for the project's launcher,
    the tails of its power log and slurmctld log."""
    logs = Path(conf).resolve().parents[1] / "log"
    return "\n".join(
        [
            "squeue:",
            _run(conf, "squeue", "-o", "%i %j %T %r %S %N"),
            "sinfo:",
            _run(conf, "sinfo", "-N", "-o", "%N %T %E"),
            f"power log ({logs / 'power.log'}):",
            _tail(logs / "power.log", log_lines),
            "slurmctld log:",
            _tail(logs / "slurmctld.log", log_lines),
        ]
    )


def node_states(conf: str) -> dict[str, str]:
    """Node name -> sinfo's short state (``idle``, ``idle~``, ``mix``, ``down*`` ...)."""
    out = _run(conf, "sinfo", "-h", "-N", "-o", "%N %t")
    return dict(ln.split(None, 1) for ln in out.splitlines() if len(ln.split()) == 2)


def reset(conf: str, timeout: float = 180.0) -> str | None:
    """Cancel every job and bring every node back to idle; None when done, else what is
    still wrong (with :func:`describe`)."""
    jobs = _run(conf, "squeue", "-h", "-o", "%i").split()
    if jobs:
        _run(conf, "scancel", *jobs)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = node_states(conf)
        left = _run(conf, "squeue", "-h", "-o", "%i").split()
        if states and not left and all(s == "idle" for s in states.values()):
            return None
        _wake(conf, states)
        time.sleep(1.0)
    return f"the cluster did not come back to idle in {timeout:.0f} s\n{describe(conf)}"


def _wake(conf: str, states: dict[str, str]) -> None:
    off = [n for n, s in states.items() if s.endswith(("~",))]
    down = [n for n, s in states.items() if s.startswith(("down", "drain"))]
    if off:
        _run(conf, "scontrol", "update", f"nodename={','.join(off)}", "state=power_up")
    if down:
        _run(conf, "scontrol", "update", f"nodename={','.join(down)}", "state=resume")
