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

from gpuhint.slurm.power import Node
from gpuhint.slurm.priority import SlurmJob

SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmCommandError(RuntimeError):
    """A Slurm command failed (one line: the command and Slurm's message)."""


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
                errors="replace",  # a job name or comment need not be UTF-8
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
    def nodes(self) -> list[Node]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%t"])
        seen: dict[str, Node] = {}
        for line in out.splitlines():
            name, _, state = line.partition("|")
            if name and name not in seen:
                seen[name] = Node(name.strip(), _long_state(state.strip()))
        return list(seen.values())

    def pending_jobs(self, pin_tolerance: int = 10) -> list[SlurmJob]:
        """Pending jobs (array tasks one by one) with site factor, pinned and held flags
        and comment.

        ``sprio`` prints each factor weighted; a job whose priority differs from their sum
        (minus the nice adjustment) by more than ``pin_tolerance`` had ``Priority=`` set by
        an admin: it is pinned (a job pending in several partitions has a row, and a sum,
        per partition: it is pinned when it matches none). Priority 0 means held. The
        comment comes last, whole (it may hold ``|``); Slurm prints ``(null)`` for none.
        """
        out = self.run(["squeue", "-h", "-r", "--states=PD", "-o", "%i|%A|%Q|%k"])
        factors = self._sprio()
        jobs = []
        for line in out.splitlines():
            parts = line.split("|", 3)
            if len(parts) < 4:
                continue
            job_id, raw_id, prio = parts[0].strip(), parts[1].strip(), _int(parts[2])
            site, totals = factors.get(raw_id, (None, []))
            pinned = bool(totals) and all(abs(prio - t) > pin_tolerance for t in totals)
            comment = "" if parts[3] == "(null)" else parts[3]
            held = prio == 0
            jobs.append(SlurmJob(job_id, "PENDING", site, pinned, held, comment, raw_id))
        return jobs

    def _sprio(self) -> dict[str, tuple[int | None, list[int]]]:
        """``{raw job id: (site factor, [sum of weighted factors - nice, ...])}``: one sum
        per row, as sprio prints a job pending in several partitions once per partition."""
        out = self.run(["sprio", "-h", "-o", "%i|%A|%B|%F|%J|%P|%Q|%S|%T|%N"], check=False)
        result: dict[str, tuple[int | None, list[int]]] = {}
        for line in out.splitlines():
            p = line.split("|")
            if len(p) < 10:
                continue
            tres = sum(_int(x.partition("=")[2]) for x in p[8].split(",") if "=" in x)
            total = sum(_int(x) for x in p[1:8]) + tres - _int(p[9])
            result.setdefault(p[0].strip(), (_int(p[7]), []))[1].append(max(total, 1))
        return result

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
                errors="replace",
                env=self.env,
                timeout=max(self.timeout_s, 0.05 * len(lines)),
            )
        except FileNotFoundError:
            raise SlurmCommandError("scontrol: command not found (install Slurm)") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"scontrol: {len(lines)} updates timed out") from None
        return [ln for ln in proc.stderr.splitlines() if ln.strip()]


def _int(text: str) -> int:
    try:
        return int(float(text))
    except ValueError:
        return 0


class SlurmNodes:
    """:class:`~gpuhint.slurm.power.NodePort` on a real slurmctld."""

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli

    def nodes(self) -> list[Node]:
        return self.cli.nodes()

    def apply(self, lines: Sequence[str]) -> list[str]:
        return self.cli.scontrol_batch(lines)


class SlurmQueue:
    """:class:`~gpuhint.slurm.priority.SlurmPort` on a real slurmctld."""

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli

    def queue(self) -> list[SlurmJob]:
        return self.cli.pending_jobs()

    def apply(self, lines: Sequence[str]) -> list[str]:
        return self.cli.scontrol_batch(lines)


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
