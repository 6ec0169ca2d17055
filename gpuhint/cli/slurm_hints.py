"""The Slurm appliers' side of Redis: hints as a :class:`~gpuhint.slurm.priority.HintPort`
and waiting on the change stream for the next hint change."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("gpuhint.slurm")


class _ClientHints:
    """:class:`~gpuhint.slurm.priority.HintPort` on :class:`gpuhint.redis.client.HintClient`."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.unreadable: Any = None  # an UnreadableHints once a cluster was read

    def priorities(self, cluster: str) -> dict[str, float]:
        return self.snapshot(cluster).priorities

    def snapshot(self, cluster: str) -> Any:
        """The hints mapped onto factors (not those of a VC in arrival order, nor values
        this version cannot read: those jobs count as unhinted), and the cluster's last
        sign of life: its newest hint's ``created_at`` or its load summary's time
        (:func:`gpuhint.cores.applier_hints.read_applier_hints`)."""
        from gpuhint.cores.applier_hints import UnreadableHints, read_applier_hints
        from gpuhint.slurm.priority import HintSnapshot

        got = read_applier_hints(self.client, cluster)
        if self.unreadable is None:
            self.unreadable = UnreadableHints(cluster)
        self.unreadable.said(got.unreadable)
        return HintSnapshot(got.services, got.last_alive)

    def starts(self, cluster: str) -> dict[str, Any]:
        """job id -> its :class:`~gpuhint.slurm.start_comment.Start` (every VC's forecast)."""
        from gpuhint.slurm.start_comment import Start

        return {j: Start(*t) for j, t in self.client.job_starts(cluster).items()}


HINT_CHANGES = {"hint", "hint_updated", "hint_removed", "rebuilt"}


def _wait_for_hint_change(
    client: Any, cluster: str, stop: threading.Event, until: float, after: str
) -> tuple[str, bool]:
    """Follow the change stream until a hint change of ``cluster`` or ``until``.

    Returns the last change id read and whether a hint changed.
    """
    import redis

    last = after
    while not stop.is_set() and time.monotonic() < until:
        try:
            got = False
            for ch in client.changes(after=last, block_ms=1000):
                last = ch.id
                if ch.type in HINT_CHANGES and ch.fields.get("cluster") in (None, cluster):
                    got = True
                    break
                if stop.is_set() or time.monotonic() >= until:
                    break
            if _STREAM_DOWN.is_set():
                log.info("change stream readable again")
                _STREAM_DOWN.clear()
            if got:
                return last, True
        except redis.RedisError as exc:
            if not _STREAM_DOWN.is_set():  # once per outage, not every 2 s
                log.warning("change stream: %s (retrying quietly)", _one_line(exc))
                _STREAM_DOWN.set()
            stop.wait(2.0)
            return last, False
    return last, False


_STREAM_DOWN = threading.Event()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
