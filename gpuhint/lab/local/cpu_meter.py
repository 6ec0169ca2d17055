"""CPU used by named processes and by the whole machine over a window (Linux /proc).

A benchmark on one machine shares its cores between the workers, the broker, Redis and
itself; how many cores each used while it ran says whether a second worker had any CPU
left to use. Processes are found by pid, or by the TCP port they listen on (a local
Kafka broker or Redis, however it was started; one in a container is not found this
way, and its CPU is then not reported).

>>> import os, time
>>> m = CpuMeter(lambda: {"me": [os.getpid()]})
>>> end = time.thread_time() + 0.05
>>> while time.thread_time() < end:
...     pass
>>> used = m.stop()
>>> used["seconds"] > 0 and 0 <= used["me_cores"] and 0 <= used["machine_busy_cores"]
True
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["CpuMeter", "listening_pid", "process_cpu_s", "usable_cores"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot; (0, 0) without /proc."""
    try:
        line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return 0.0, 0.0
    v = [int(x) for x in line.split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return (sum(v[:8]) - idle) / _TICK, sum(v[:8]) / _TICK


def listening_pid(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` here, if this user can see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in inodes:
                    return int(proc.name)
            except OSError:  # this descriptor closed meanwhile
                continue
    return None


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuMeter:
    """Starts on creation; :meth:`stop` gives cores used per name and by the machine.

    ``pids()`` is called at start and at stop: a process that appears in between (a
    worker started during the window) counts from zero, one that is gone by the stop
    counts as nothing (its last reading is lost with it)."""

    def __init__(self, pids: Callable[[], dict[str, list[int]]]) -> None:
        self._pids = pids
        self._t0 = time.monotonic()
        self._machine0 = machine_cpu_s()
        self._start = {p: process_cpu_s(p) or 0.0 for ps in pids().values() for p in ps}

    def stop(self) -> dict[str, float]:
        seconds = max(time.monotonic() - self._t0, 1e-9)
        busy1, total1 = machine_cpu_s()
        busy0, total0 = self._machine0
        out = {"seconds": seconds}
        for name, ps in self._pids().items():
            used = 0.0
            for p in ps:
                now = process_cpu_s(p)
                if now is not None:
                    used += now - self._start.get(p, 0.0)
            out[f"{name}_cores"] = used / seconds
        cores = os.cpu_count() or 1
        # the machine's share, in cores (total ticks span every core); no tick yet: 0
        out["machine_busy_cores"] = (
            (busy1 - busy0) / (total1 - total0) * cores if total1 > total0 else 0.0
        )
        return out
