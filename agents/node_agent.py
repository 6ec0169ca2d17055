"""The node agent loop: sample NVML, poll the scheduler, publish, every ``interval_s``.

Each tick publishes one :class:`~gpuhint.wire.contract.GpuSample` per readable GPU to
``Topics.gpu_samples`` and one :class:`~gpuhint.wire.contract.NodeStatus` to
``Topics.node_status``, both keyed ``cluster/node`` (:func:`gpuhint.wire.topics.node_key`),
plus any scheduler :class:`~gpuhint.wire.contract.JobEvent` changes to ``Topics.job_events``
keyed ``cluster/vc``. Ticks follow a fixed schedule (a slow tick skips the missed
ones rather than bursting); :meth:`NodeAgent.run` returns when its stop event is set
(the CLI sets it on SIGTERM/SIGINT), and :meth:`NodeAgent.close` flushes.

>>> from agents.fake_nvml import FakeNvml
>>> from agents.publisher import BufferedPublisher, MemoryTransport
>>> t = MemoryTransport()
>>> agent = NodeAgent(nvml=FakeNvml("steady"), publisher=BufferedPublisher(t),
...                   cluster="c", node="n1")
>>> agent.start(); agent.tick(); agent.close()
0
>>> sorted({r.topic for r in t.records}), len(t.records)
(['gpuhint.gpu-samples', 'gpuhint.node-status'], 9)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from agents.nvml import Nvml, NvmlError
from agents.publisher import BufferedPublisher
from agents.sampler import Sampler, SampleResult
from gpuhint.cores.job_roster import (
    DEFAULT_ROSTER_EVERY_S,
    RosterClock,
    agent_identity,
    roster_parts,
)
from gpuhint.cores.job_tracker import SchedulerFeed
from gpuhint.wire.contract import NodeStatus, encode_message
from gpuhint.wire.topics import Topics, job_key, node_key

log = logging.getLogger(__name__)


class NodeFeed(Protocol):
    """A source of other nodes' status (e.g. :class:`gpuhint.slurm.nodes.SlurmNodeFeed`)."""

    name: str

    def poll(self, now: float) -> list[NodeStatus]: ...


class NodeAgent:
    """Ties a :class:`Sampler` (if ``nvml`` is given), scheduler feeds and a publisher."""

    def __init__(
        self,
        *,
        nvml: Nvml | None,
        publisher: BufferedPublisher,
        cluster: str,
        node: str,
        topics: Topics | None = None,
        interval_s: float = 10.0,
        feeds: Sequence[SchedulerFeed] = (),
        node_feeds: Sequence[NodeFeed] = (),
        busy_util_pct: float = 5.0,
        clock: Callable[[], float] = time.time,
        roster_every_s: float = DEFAULT_ROSTER_EVERY_S,
    ) -> None:
        self.nvml = nvml
        self.publisher = publisher
        self.cluster = cluster
        self.node = node
        self.topics = topics or Topics()
        self.interval_s = interval_s
        self.feeds = list(feeds)
        self.node_feeds = list(node_feeds)
        self.clock = clock
        self.sampler = (
            Sampler(nvml, cluster=cluster, node=node, busy_util_pct=busy_util_pct, clock=clock)
            if nvml is not None
            else None
        )
        self.ticks = 0
        self.last_sample: SampleResult | None = None  # the newest, for /metrics
        self.last_tick_at: float | None = None
        self._key = node_key(cluster, node)
        self._started = False
        self._rosters = RosterClock(roster_every_s)
        self.rosters_sent = 0
        self.identity = agent_identity(node, [f.identity() for f in self.feeds])
        """Who sends this agent's rosters (the worker counts misses per agent)."""

    def start(self) -> None:
        """Initialise NVML (raises :class:`~agents.nvml.NvmlUnavailable`) and XID events."""
        if self.nvml is not None:
            self.nvml.init()
            try:
                self.nvml.watch_xid()
            except NvmlError as exc:
                log.warning("XID events unavailable (%s); xid_errors will stay empty", exc)
            try:
                log.info(
                    "NVML driver %s, %d GPU(s)",
                    self.nvml.driver_version(),
                    self.nvml.device_count(),
                )
            except NvmlError as exc:
                log.warning("NVML: %s", exc)
        self._started = True

    def tick(self) -> None:
        """One round: scheduler events, other nodes' status, GPU samples and this node's
        status, then sending for at most ``interval_s`` (even when a step before it
        raised), so a backlog to a slow broker does not hold up the next sample."""
        now = self.clock()
        try:
            running: set[str] = set()
            for feed in self.feeds:
                for ev in feed.poll(now):
                    self.publisher.publish(
                        self.topics.job_events, job_key(ev.cluster, ev.vc), encode_message(ev)
                    )
                running.update(feed.tracker.running_on(self.node))
            self._publish_rosters(now)
            for node_feed in self.node_feeds:
                for ns in node_feed.poll(now):
                    key = node_key(ns.cluster, ns.node)
                    self.publisher.publish(self.topics.node_status, key, encode_message(ns))
            if self.sampler is not None:
                result = self.sampler.sample(
                    running_jobs=sorted(running), samples_dropped=self.publisher.dropped
                )
                self.last_sample = result
                for s in result.gpu_samples:
                    self.publisher.publish(self.topics.gpu_samples, self._key, encode_message(s))
                self.publisher.publish(
                    self.topics.node_status, self._key, encode_message(result.status)
                )
        finally:  # what is buffered (from earlier ticks too) still goes out
            self.publisher.pump(budget_s=self.interval_s)
            self._events_safe()
        self.ticks += 1
        self.last_tick_at = now

    def _publish_rosters(self, now: float) -> None:
        """Every feed's jobs not finished, per VC, as rosters (:mod:`gpuhint.cores.job_roster`),
        when due and only after a tick in which every feed read its scheduler: a roster
        from a failed read would list jobs that ended since the last good one."""
        if not self.feeds or any(
            f.failures or not f.lists_every_unfinished_job() for f in self.feeds
        ):
            return
        if not self._rosters.due(now):
            return
        by_vc: dict[tuple[str, str], list[str]] = {}
        for feed in self.feeds:
            for vc in feed.vcs():
                by_vc.setdefault((feed.tracker.cluster, vc), [])
            for vc, ids in feed.tracker.roster().items():
                by_vc.setdefault((feed.tracker.cluster, vc), []).extend(ids)
        for (cluster, vc), ids in by_vc.items():
            try:
                parts = roster_parts(cluster, vc, now, ids, self.identity)
            except ValueError as exc:  # a VC name the contract refuses: not this one
                log.warning("no roster for VC %r: %s", vc, str(exc).splitlines()[0])
                continue
            for part in parts:
                self.publisher.publish(
                    self.topics.job_events, job_key(cluster, vc), encode_message(part)
                )
        self.rosters_sent += 1

    def run(self, stop: threading.Event, *, max_ticks: int | None = None) -> None:
        """Tick every ``interval_s`` until ``stop`` is set (or ``max_ticks`` ticks)."""
        if not self._started:
            self.start()
        t0 = time.monotonic()
        k = 0
        done = 0
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug in one tick must not kill a node agent for good
                log.exception("tick failed; continuing")
            done += 1
            if max_ticks is not None and done >= max_ticks:
                break
            k += 1
            next_at = t0 + k * self.interval_s
            now = time.monotonic()
            if next_at < now:  # we are late: skip the missed ticks
                k = int((now - t0) // self.interval_s) + 1
                next_at = t0 + k * self.interval_s
            stop.wait(next_at - now)

    def _events_safe(self) -> None:
        """Once every event published so far is acknowledged or on disk, the feeds write
        their watermarks (before, a crash would lose events a watermark counts as sent)."""
        if self.publisher.in_memory == 0:
            for feed in self.feeds:
                feed.durable()

    def close(self, flush_timeout_s: float = 10.0) -> int:
        """Flush (spilling or counting what is left) and shut NVML down; return records lost."""
        lost = self.publisher.close(flush_timeout_s)
        if not lost:  # sent, or kept in the spill dir: announced for good
            self._events_safe()
        if self.nvml is not None and self._started:
            try:
                self.nvml.shutdown()
            except NvmlError as exc:
                log.debug("NVML shutdown: %s", exc)
        return lost
