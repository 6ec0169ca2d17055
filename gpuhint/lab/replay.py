"""Replay a historical trace into Kafka as JobEvents, in time order.

The pacing is pure (:func:`paced`), the sending goes through any ``send(topic, key,
value)`` callable, so tests drive it without a broker and the CLI with kafka-python.
:func:`replay_acked` is the reliable path of ``gpuhint replay``: batches over a
:class:`~agents.publisher.Transport`, retried with backoff through a broker outage,
with a count of acknowledged events that :class:`ResumeState` keeps for ``--resume``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agents.publisher import Record, Transport, TransportError
from gpuhint.wire.contract import JobEvent, encode_message
from gpuhint.wire.topics import job_key

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes], object]


def paced(
    events: Iterable[JobEvent],
    speed: float | None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[JobEvent]:
    """Yield events, sleeping so that trace time runs ``speed`` times faster than real time.

    ``speed=None`` yields as fast as the consumer takes them.
    """
    t0_trace: float | None = None
    t0_wall = clock()
    for ev in events:
        if speed is not None:
            if t0_trace is None:
                t0_trace = ev.time
            due = t0_wall + (ev.time - t0_trace) / speed
            delay = due - clock()
            if delay > 0:
                sleep(delay)
        yield ev


def replay(events: Iterable[JobEvent], topic: str, send: Send) -> int:
    """Send each event to ``topic`` keyed by cluster/VC; return how many were sent."""
    n = 0
    for ev in events:
        send(topic, job_key(ev.cluster, ev.vc), encode_message(ev))
        n += 1
    return n


class BrokerGone(RuntimeError):
    """The broker stayed unreachable longer than the retry budget; says how far we got."""


@dataclass
class ReplayProgress:
    """Where a replay stands: ``acked`` events (from the start of the list) are in Kafka."""

    total: int
    acked: int = 0
    down_since: float | None = None
    outages: int = 0
    retries: int = 0


def replay_acked(
    events: Sequence[JobEvent],
    topic: str,
    transport: Transport,
    *,
    start: int = 0,
    speed: float | None = None,
    batch_max: int = 500,
    retry_s: float = 300.0,
    retry_initial_s: float = 0.5,
    retry_max_s: float = 10.0,
    send_timeout_s: float = 10.0,
    on_progress: Callable[[ReplayProgress], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log_every_s: float = 30.0,
) -> ReplayProgress:
    """Send ``events[start:]`` in order, in batches, each batch acknowledged before the next.

    A failed send is retried with exponential backoff (``retry_initial_s`` doubling up
    to ``retry_max_s``) while the broker has been down less than ``retry_s``; then
    :class:`BrokerGone` says how many events were acknowledged (``--resume`` continues
    there). While down, one log line every ``log_every_s``. ``on_progress`` sees every
    acknowledged batch and every failed try. ``speed`` paces trace time as :func:`paced`.
    """
    prog = ReplayProgress(total=len(events), acked=start)
    t0_trace = events[start].time if start < len(events) else 0.0
    t0_wall = clock()
    backoff = 0.0
    last_log = 0.0
    pending: list[Record] = []
    while prog.acked < len(events):
        if not pending:
            end = min(len(events), prog.acked + batch_max)
            if speed is not None:
                end = _due_end(events, prog.acked, end, speed, t0_trace, t0_wall, clock, sleep)
            pending = [
                Record(topic, job_key(ev.cluster, ev.vc), encode_message(ev))
                for ev in events[prog.acked : end]
            ]
        try:
            n = transport.send(pending, send_timeout_s)
        except TransportError as exc:
            now = clock()
            prog.retries += 1
            if prog.down_since is None:
                prog.down_since, last_log = now, now
                prog.outages += 1
                log.warning(
                    "%s; retrying for up to %.0f s (%d of %d events acknowledged)",
                    exc,
                    retry_s,
                    prog.acked,
                    prog.total,
                )
            elif now - prog.down_since >= retry_s:
                raise BrokerGone(
                    f"Kafka unreachable for {now - prog.down_since:.0f} s ({exc}); "
                    f"{prog.acked:,} of {prog.total:,} events acknowledged"
                ) from None
            elif now - last_log >= log_every_s:
                last_log = now
                log.warning("Kafka still down after %.0f s: %s", now - prog.down_since, exc)
            if on_progress is not None:
                on_progress(prog)
            backoff = min(retry_max_s, backoff * 2 if backoff else retry_initial_s)
            sleep(backoff)
            continue
        if prog.down_since is not None:
            log.warning("Kafka back after %.0f s", clock() - prog.down_since)
            prog.down_since = None
            backoff = 0.0
        prog.acked += n
        pending = pending[n:]
        if on_progress is not None:
            on_progress(prog)
    return prog


def _due_end(
    events: Sequence[JobEvent],
    first: int,
    end: int,
    speed: float,
    t0_trace: float,
    t0_wall: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    """Only what is due, paced at ``speed``: at least ``events[first]`` (after waiting for
    it), at most up to ``end``. Returns the end of the batch."""
    due = t0_wall + (events[first].time - t0_trace) / speed
    if due > clock():
        sleep(due - clock())
    now = clock()
    stop = first + 1
    while stop < end and t0_wall + (events[stop].time - t0_trace) / speed <= now:
        stop += 1
    return stop


@dataclass(frozen=True)
class ResumeState:
    """The replay state file: which replay (``fingerprint``) and how far it got (``acked``)."""

    path: Path
    fingerprint: str

    def load(self) -> int:
        """Events already acknowledged by an earlier run of the same replay (0 if none)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: unreadable replay state ({exc})") from None
        if data.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"{self.path}: the state is of another replay (trace, topic, cluster, --until "
                "or --limit differ); run without --resume to start over"
            )
        acked = data.get("acked")
        if not isinstance(acked, int) or acked < 0:
            raise ValueError(f"{self.path}: bad 'acked' in replay state")
        return acked

    def save(self, acked: int, total: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        state = {"fingerprint": self.fingerprint, "acked": acked, "total": total}
        tmp.write_text(json.dumps(state))
        tmp.replace(self.path)


def fingerprint(*parts: object) -> str:
    """A short digest naming one replay (trace file identity and the options that cut it)."""
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:16]
