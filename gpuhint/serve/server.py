"""The ``gpuhint serve`` loop: poll the scheduler, log, handle, apply; durable between.

Each tick: the feed is polled; its new job events are appended to the local log *with*
the feed's watermark, in one transaction (a restart neither misses a transition nor
publishes one twice); the log is drained through the worker's batch routine
(:class:`~gpuhint.serve.runner.OneProcess`); with CES, every node's status (``sinfo``)
goes to its CES side; then every applier whose interval is due runs one pass. A failing
pass is logged once per outage and retried; the hints stay.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuhint.cores.job_tracker import JobTracker
from gpuhint.cores.job_watermark import restore_tracker, tracker_doc
from gpuhint.serve.runner import OneProcess, Stopped
from gpuhint.slurm.nodes import SlurmNodeFeed
from gpuhint.wire.contract import JobEvent

log = logging.getLogger(__name__)

WATERMARK_EVERY_S = 60.0
"""A poll that brings no event rewrites the feed's watermark at most this often (its
document lists every job the scheduler shows: ~1.4 MB for 5,000 jobs, fsynced). With
new events it is always written, in their transaction; one not rewritten costs a restart
only a slightly wider first ``sacct`` window."""

WATERMARK_META = "slurm_watermark"
"""The local log's meta key for the feed's tracker; Kueue's feed uses it too (the name
stays: state files written by earlier versions hold it)."""


class Feed(Protocol):
    """A scheduler's job-event feed (Slurm's :class:`~gpuhint.slurm.feed.SlurmFeed`,
    Kueue's :class:`~gpuhint.kueue.pods.KueueFeed`): its tracker is the watermark."""

    tracker: JobTracker
    last_poll: float | None  # the last poll that read the scheduler (None: none yet)

    def poll(self, now: float) -> list[JobEvent]: ...


@dataclass
class Pass:
    """A periodic action (an applier's pass), run when ``interval_s`` has passed."""

    name: str
    run: Callable[[], object]
    interval_s: float
    next_at: float = 0.0
    failures: int = 0
    error: str | None = None
    """Why the last attempt failed (None: it worked, or none yet)."""

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def attempt(self, now: float) -> bool:
        """Run once; a failure is logged once per outage and retried with backoff."""
        try:
            self.run()
        except Exception as exc:  # a scheduler or Redis outage: hints stay, retry later
            self.failures += 1
            self.error = " ".join(f"{type(exc).__name__}: {exc}".split())
            (log.warning if self.failures == 1 else log.debug)(
                "%s pass failed (%d): %s: %s; retrying",
                self.name,
                self.failures,
                type(exc).__name__,
                exc,
            )
            self.next_at = now + min(self.interval_s, 2.0**self.failures)
            return False
        if self.failures:
            log.info("%s pass succeeded again after %d failed", self.name, self.failures)
        self.failures = 0
        self.error = None
        self.next_at = now + self.interval_s
        return True


def restore_feed(feed: Feed, one: OneProcess) -> None:
    """Give the feed the watermark committed with the log (if any)."""
    raw = one.log.meta(WATERMARK_META)
    if raw is not None:  # one naming no feed (written before feeds were named) is taken
        doc = json.loads(raw)
        feed.last_poll = restore_tracker(feed.tracker, doc, one.log.path, _kind(feed))
        log.info(
            "serve: resumed at offset %d, %d job(s) known to the feed",
            one.log.committed(),
            len(feed.tracker._step),
        )


def _kind(feed: Feed) -> str | None:
    """The feed's name in its watermark (``slurm``, ``kueue``; None: a feed without)."""
    return getattr(feed, "kind", None) or None


@dataclass
class Server:
    """Feed -> local log -> batch routine -> store; appliers every ``interval_s``."""

    one: OneProcess
    feed: Feed
    passes: Sequence[Pass] = ()
    poll_s: float = 10.0
    nodes: SlurmNodeFeed | None = None
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)
    ticks: int = 0
    events: int = 0
    watermark_at: float | None = None
    """When the feed's watermark was last written (this process's clock)."""

    def __post_init__(self) -> None:
        self.one.stop = self.stop  # a stop also ends a flush held by a store outage

    def tick(self) -> int:
        """One poll, append, drain and the due passes; the events handled."""
        now = self.clock()
        new = self.feed.poll(now)
        polled = self.feed.last_poll  # unchanged when the poll failed: the window stays
        meta = {}
        due = self.watermark_at is None or now - self.watermark_at >= WATERMARK_EVERY_S
        if polled is not None and (new or due):
            doc = tracker_doc(self.feed.tracker, polled, _kind(self.feed))
            meta[WATERMARK_META] = json.dumps(doc, separators=(",", ":"))
            self.watermark_at = now
        self.one.ingest(new, meta=meta)
        handled = self.one.drain()
        if self.nodes is not None:
            self.one.observe_nodes(self.nodes.poll(now))
        self.events += len(new)
        self.ticks += 1
        for p in self.passes:
            if p.due(time.monotonic()):
                p.attempt(time.monotonic())
        if new:
            log.info("serve: %d new job event(s), %d handled", len(new), handled)
        return handled

    def run(self, once: bool = False) -> None:
        """Tick every ``poll_s`` until :attr:`stop` is set (SIGTERM), or once."""
        while not self.stop.is_set():
            try:
                self.tick()
            except Stopped as exc:
                log.warning(
                    "serve: stopped while the store was down (%s); the events from offset "
                    "%d on are handled at the next start",
                    exc,
                    self.one.log.committed(),
                )
                return
            if once:
                return
            self.stop.wait(self.poll_s)
