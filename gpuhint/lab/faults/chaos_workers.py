"""The fault suite's ``gpuhint worker`` processes: started, SIGKILLed, restarted after a
crash, and read from outside (their logs, their peak memory)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class Workers:
    """``gpuhint worker`` processes; one that dies on its own is a crash, and is restarted."""

    def __init__(self, env: dict[str, str], logdir: Path, static: bool = False) -> None:
        self.env = env
        self.logdir = logdir
        self.static = static
        """Each slot keeps one ``GPUHINT_WORKER_INSTANCE_ID`` across restarts (static
        group membership, as a StatefulSet's pod names give)."""
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, Path] = {}
        self.died_at: dict[int, float] = {}
        self.crashes = 0
        self.crash_lines: list[str] = []
        self._n = 0

    def start(self, slot: int = 0) -> None:
        self._n += 1
        log = self.logdir / f"worker-{slot}-{self._n}.log"
        fh = open(log, "wb")  # noqa: SIM115 - the child keeps it
        self.procs[slot] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuhint",
                "worker",
                "--loglevel",
                os.environ.get("GPUHINT_CHAOS_WORKER_LOGLEVEL", "warning"),
            ],
            env=self.env
            if not self.static
            else dict(self.env, GPUHINT_WORKER_INSTANCE_ID=f"{self.env['GPUHINT_APP_ID']}-{slot}"),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fh.close()
        self.logs[slot] = log

    def log_lines(self) -> int:
        """Lines written so far to every log of these workers."""
        return sum(
            p.read_bytes().count(b"\n") for p in self.logdir.glob("worker-*.log") if p.is_file()
        )

    def kill(self, slot: int = 0) -> None:
        p = self.procs.pop(slot)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)

    def check(self) -> None:
        """Count workers that exited on their own; restart them after 5 s (like systemd)."""
        now = time.monotonic()
        for slot, p in list(self.procs.items()):
            if p.poll() is None:
                continue
            if slot not in self.died_at:
                self.died_at[slot] = now
                self.crashes += 1
                tail = self.logs[slot].read_text(errors="replace").strip().splitlines()[-3:]
                self.crash_lines.append(f"worker exited {p.returncode}: {' | '.join(tail)}"[:400])
            elif now - self.died_at[slot] >= 5.0:
                del self.died_at[slot]
                self.start(slot)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        self.procs.clear()


def gaps_logged(workers: Workers) -> int:
    """Skipped offsets the workers found and sought back to (their logs say so)."""
    return sum(
        p.read_bytes().count(b"were skipped on the way")
        for p in workers.logdir.glob("worker-*.log")
        if p.is_file()
    )


def peak_rss_mb(workers: Workers) -> float | None:
    """The largest VmHWM among the live worker processes, in MB."""
    best = None
    for p in workers.procs.values():
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        mb = int(line.split()[1]) / 1024
                        best = mb if best is None else max(best, mb)
        except OSError:
            continue
    return None if best is None else round(best, 1)
