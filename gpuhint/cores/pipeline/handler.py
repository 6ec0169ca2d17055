"""The one message path: bytes, key, partition, offset in -> outcome out. Pure.

The Faust agents (:mod:`streams.app`), ``gpuhint demo`` and the tests all call
:class:`MessageHandler`; it decodes and checks a message, applies it to the hint core
(or the CES processor) and says what the edge must do: the hint written (the store
holds the buffered writes), a dead letter with its reason, messages to forward. It
imports no Faust, Kafka or Redis.

>>> from gpuhint.wire.contract import JobEvent, encode_message
>>> from gpuhint.cores.qssf import HintEngine
>>> from gpuhint.cores.sink import InMemoryStore
>>> from models.history import HistoryEstimator
>>> h = MessageHandler(HintEngine(HistoryEstimator, InMemoryStore()))
>>> ev = JobEvent(phase="submitted", job_id="7", vc="a", num_gpus=1, time=0, submit_time=0)
>>> h.job_event(Message("gpuhint.job-events", 0, 0, b"default/a", encode_message(ev))).state_key
'default/a'
>>> h.job_event(Message("gpuhint.job-events", 0, 1, b"wrong", encode_message(ev))).reason
"key b'wrong' is not the event's cluster/vc b'default/a' (per-VC state must stay on one partition)"
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.pipeline.dead_letter import DEFAULT_MAX_BYTES, dead_letter_record
from gpuhint.cores.qssf import HintEngine, state_key
from gpuhint.cores.sink import SinkError
from gpuhint.wire.contract import (
    DEFAULT_LIMITS,
    InvalidMessage,
    JobEvent,
    JobPhase,
    JobRoster,
    Limits,
    NodeStatus,
    PriorityHint,
    decode_message,
    encode_message,
)
from gpuhint.wire.topics import Topics, cluster_key, job_key

log = logging.getLogger(__name__)

OUTAGES = (SinkError, ConnectionError, TimeoutError)
"""Errors of the sink (or a connection), not of the message: let through, never
dead-lettered as a processing error (the driver pauses or restarts; the event comes
again)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One consumed record, as any consumer sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Forward:
    """A record the edge must produce (e.g. a placement re-keyed for the CES agent)."""

    topic: str
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one message did. ``dead_letter`` is the record to produce, ``reason`` why."""

    hint: PriorityHint | None = None
    state_key: str | None = None
    dead_letter: bytes | None = None
    reason: str | None = None
    forwards: tuple[Forward, ...] = ()


MAX_REASONS = 100
"""Distinct :attr:`WorkerStats.reasons` entries; past them a new one counts as ``other``."""

_HEAD = re.compile(r"[^:'\"\d(\[{-]*")


def reason_head(reason: str) -> str:
    """A reason's words before its first value (a colon, quote, sign, digit or bracket): the
    ``WorkerStats.reasons`` entry, one per kind of fault, never one per message.

    >>> reason_head("key b'42' is not the event's cluster/vc b'c/a' (...)")
    'key b'
    >>> reason_head("unsupported schema_version 7 (this build reads 1)")
    'unsupported schema_version'
    """
    return _HEAD.match(reason).group().rstrip(" ,") or "invalid"  # type: ignore[union-attr]


@dataclass
class WorkerStats:
    """What the worker did with messages (the ops collector reads this object)."""

    processed: int = 0
    dead_letter: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    """Dead letters by :func:`reason_head` (at most :data:`MAX_REASONS` + 1 entries)."""


class MessageHandler:
    """Decode, check, apply; return an :class:`Outcome`. One instance per worker."""

    def __init__(
        self,
        engine: HintEngine,
        topics: Topics | None = None,
        ces: ClusterLoadProcessor | None = None,
        limits: Limits = DEFAULT_LIMITS,
        dead_letter_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.engine = engine
        self.topics = topics or Topics()
        self.ces = ces
        self.limits = limits
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.stats = WorkerStats()

    def _dead(self, msg: Message, reason: str) -> Outcome:
        s = self.stats
        s.dead_letter += 1
        short = reason_head(reason)
        if short not in s.reasons and len(s.reasons) >= MAX_REASONS:
            short = "other"  # e.g. fields named by the sender: ever new names
        s.reasons[short] = s.reasons.get(short, 0) + 1
        self.engine.store.count("dead_letter")
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, reason)
        record = dead_letter_record(
            reason=reason,
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            max_bytes=self.dead_letter_max_bytes,
        )
        return Outcome(dead_letter=record, reason=reason)

    def job_event(self, msg: Message) -> Outcome:
        """A record of the job-event topic (keyed ``cluster/vc``): a job event or a roster."""
        try:
            if not msg.value:
                raise InvalidMessage("empty message")
            ev = decode_message(msg.value, self.limits)
            if not isinstance(ev, JobEvent | JobRoster):
                raise InvalidMessage(f"expected kind 'job' or 'job_roster', got {ev.kind!r}")
            want = job_key(ev.cluster, ev.vc)
            if msg.key != want:
                raise InvalidMessage(
                    f"key {msg.key!r} is not the event's cluster/vc {want!r} "
                    "(per-VC state must stay on one partition)"
                )
        except InvalidMessage as exc:
            return self._dead(msg, exc.reason)
        if isinstance(ev, JobRoster):
            return self._roster(msg, ev)
        try:
            hint = self.engine.on_job_event(ev, offset=msg.offset)
        except OUTAGES:  # the sink, not the event: pause the work (never dead-letter)
            raise
        except Exception as exc:  # a bug must not lose the event nor stop the worker
            log.exception("processing failed for job %s", ev.job_id)
            return self._dead(msg, f"processing error: {type(exc).__name__}: {exc}")
        self.stats.processed += 1
        forwards: tuple[Forward, ...] = ()
        ces = self.ces
        if ces is not None and (
            ces.wants_jobs or (ev.nodes and ev.phase is not JobPhase.SUBMITTED)
        ):
            to, key = self.topics.cluster_telemetry, cluster_key(ev.cluster)
            forwards = (Forward(to, key, msg.value),)
            if ces.wants_jobs and hint is not None and ev.phase is JobPhase.SUBMITTED:
                forwards += (Forward(to, key, encode_message(hint)),)  # its predicted duration
        return Outcome(hint=hint, state_key=state_key(ev.cluster, ev.vc), forwards=forwards)

    def _roster(self, msg: Message, roster: JobRoster) -> Outcome:
        """A roster part: the jobs it retires are applied, and forwarded to CES (which
        frees their nodes) as their ``finished`` events."""
        try:
            retired = self.engine.on_roster(roster, offset=msg.offset)
        except OUTAGES:
            raise
        except Exception as exc:
            log.exception("roster processing failed for %s/%s", roster.cluster, roster.vc)
            return self._dead(msg, f"processing error: {type(exc).__name__}: {exc}")
        self.stats.processed += 1
        forwards: tuple[Forward, ...] = ()
        if self.ces is not None:
            to, key = self.topics.cluster_telemetry, cluster_key(roster.cluster)
            forwards = tuple(Forward(to, key, encode_message(ev)) for ev in retired)
        return Outcome(state_key=state_key(roster.cluster, roster.vc), forwards=forwards)

    def node_status(self, msg: Message) -> Outcome:
        """A record of the node-status topic: validated, re-keyed by cluster for CES."""
        try:
            if not msg.value:
                raise InvalidMessage("empty message")
            ns = decode_message(msg.value, self.limits)
            if not isinstance(ns, NodeStatus):
                raise InvalidMessage(f"expected kind 'node_status', got {ns.kind!r}")
        except InvalidMessage as exc:
            return self._dead(msg, exc.reason)
        return Outcome(
            forwards=(Forward(self.topics.cluster_telemetry, cluster_key(ns.cluster), msg.value),)
        )

    def telemetry(self, msg: Message) -> Outcome:
        """A record of the internal cluster-telemetry topic (keyed by cluster)."""
        if self.ces is None:
            return Outcome()
        try:
            if not msg.value:
                raise InvalidMessage("empty message")
            m = decode_message(msg.value, self.limits)
            if not isinstance(m, NodeStatus | JobEvent | PriorityHint):
                raise InvalidMessage(f"unexpected kind {m.kind!r}")
            want = cluster_key(m.cluster)
            if msg.key != want:  # its cluster's checkpoint would have no partition
                raise InvalidMessage(
                    f"key {msg.key!r} is not the record's cluster {want!r} "
                    "(a cluster's state must stay on one partition)"
                )
        except InvalidMessage as exc:
            return self._dead(msg, exc.reason)
        try:
            self.ces.on_message(m)
        except OUTAGES:
            raise
        except Exception as exc:
            log.exception("cluster-load processing failed")
            return self._dead(msg, f"processing error: {type(exc).__name__}: {exc}")
        return Outcome()

    def handle(self, msg: Message) -> Outcome:
        """Dispatch by topic."""
        t = self.topics
        if msg.topic == t.job_events:
            return self.job_event(msg)
        if msg.topic == t.node_status:
            return self.node_status(msg)
        if msg.topic == t.cluster_telemetry:
            return self.telemetry(msg)
        return self._dead(msg, f"unexpected topic {msg.topic!r}")
