"""The thin edge to Slurm's command-line tools (``squeue``, ``scontrol``, ``sinfo``, ``sbatch``).

Everything gpuhint asks of or tells a slurmctld goes through :class:`SlurmCli`, so the
appliers' cores stay pure and are tested with an in-memory twin. ``conf`` is the
``SLURM_CONF`` to use (None: Slurm's own default, ``/etc/slurm/slurm.conf``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmCommandError(RuntimeError):
    """A Slurm command failed (one line: the command and Slurm's message)."""


@dataclass(frozen=True)
class QueuedJob:
    """A job as ``squeue`` shows it, with what the priority applier needs."""

    job_id: str
    state: str
    priority: int
    site_factor: int | None = None
    pinned: bool = False
    nodes: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A node as ``sinfo`` shows it: its state flags and whether it holds a job."""

    name: str
    state: str  # e.g. "idle", "idle~", "mixed", "allocated", "down*", "idle!"

    @property
    def base(self) -> str:
        return self.state.rstrip("~#%!*$@^-+")

    @property
    def powered_down(self) -> bool:
        return self.state.endswith("~")

    @property
    def powering(self) -> bool:
        return self.state[-1:] in ("#", "%", "!")

    @property
    def busy(self) -> bool:
        return self.base in ("allocated", "mixed", "completing")

    @property
    def idle(self) -> bool:
        return self.base == "idle" and not self.powered_down and not self.powering


class SlurmCli:
    """Runs Slurm commands against one cluster."""

    def __init__(self, conf: str | None = None, timeout_s: float = 60.0) -> None:
        self.conf = conf
        self.timeout_s = timeout_s
        self.calls = 0

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{env.get('PATH', '')}:{SBIN}"
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
        """Run one command; its stdout (raises :class:`SlurmCommandError` if it fails)."""
        self.calls += 1
        try:
            proc = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                env=self.env,
                timeout=self.timeout_s,
            )
        except FileNotFoundError:
            raise SlurmCommandError(f"{argv[0]}: command not found (install Slurm)") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{shlex.join(argv)}: timed out") from None
        if check and proc.returncode != 0:
            msg = " ".join(proc.stderr.split()) or f"exit {proc.returncode}"
            raise SlurmCommandError(f"{shlex.join(argv)}: {msg}")
        return proc.stdout

    # ------------------------------------------------------------------ reads
    def pending_and_running(self) -> list[QueuedJob]:
        """Pending, running and completing jobs, with priority and pinned flag.

        ``%Q`` is the priority, ``%i`` the id (``123_4`` for an array task); squeue
        cannot print the site factor, so ``sprio`` supplies it (see :meth:`site_factors`).
        """
        out = self.run(["squeue", "-h", "--states=PD,R,CG,CF,S", "-r", "-o", "%i|%T|%Q|%N"])
        jobs = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) < 4:
                continue
            try:
                prio = int(parts[2])
            except ValueError:
                prio = 0
            jobs.append(QueuedJob(parts[0], parts[1], prio, nodes=parts[3]))
        return jobs

    def site_factors(self) -> dict[str, int]:
        """``{job id: site factor}`` of every pending job (``sprio``)."""
        out = self.run(["sprio", "-h", "-o", "%i|%S"], check=False)
        result = {}
        for line in out.splitlines():
            a, _, b = line.partition("|")
            try:
                result[a.strip()] = int(float(b))
            except ValueError:
                continue
        return result

    def nodes(self) -> list[NodeInfo]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%t"])
        seen: dict[str, NodeInfo] = {}
        for line in out.splitlines():
            name, _, state = line.partition("|")
            if name and name not in seen:
                seen[name] = NodeInfo(name.strip(), _long_state(state.strip()))
        return list(seen.values())

    # ------------------------------------------------------------------ writes
    def scontrol_batch(self, lines: Sequence[str]) -> list[str]:
        """Run ``scontrol`` lines (``update jobid=... SiteFactor=...``) in one process.

        ``scontrol`` reads commands from stdin, one per line, so a pass of thousands of
        updates costs one fork. Returns the error lines Slurm printed (refusals).
        """
        if not lines:
            return []
        self.calls += 1
        try:
            proc = subprocess.run(
                ["scontrol"],
                input="\n".join(lines) + "\nquit\n",
                capture_output=True,
                text=True,
                env=self.env,
                timeout=max(self.timeout_s, 0.05 * len(lines)),
            )
        except FileNotFoundError:
            raise SlurmCommandError("scontrol: command not found (install Slurm)") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"scontrol: {len(lines)} updates timed out") from None
        return [ln for ln in proc.stderr.splitlines() if ln.strip()]


_SHORT_NODE = {
    "idle": "idle", "alloc": "allocated", "mix": "mixed", "comp": "completing",
    "drain": "drained", "drng": "draining", "down": "down", "resv": "reserved",
    "maint": "maint", "fail": "fail", "failg": "failing", "futr": "future", "boot": "boot",
    "inval": "inval", "plnd": "planned", "unk": "unknown", "npc": "perfctrs",
    "pow_up": "power_up", "powd": "power_down", "powering_down": "powering_down",
}  # fmt: skip


def _long_state(short: str) -> str:
    """``idle~`` stays; ``alloc`` -> ``allocated``; suffix flags are kept."""
    i = len(short)
    while i and short[i - 1] in "~#%!*$@^-+":
        i -= 1
    return _SHORT_NODE.get(short[:i], short[:i]) + short[i:]
