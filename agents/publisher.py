"""Publishing with a bounded buffer: the agent never blocks on, nor grows with, a dead broker.

:class:`BufferedPublisher` holds records in a bounded memory buffer (optionally spilling
the oldest to disk segments, also bounded) and hands them in order to a
:class:`Transport` (Kafka, stdout, or in memory). When the transport fails the records
stay buffered and sending is retried with exponential backoff; when the bound is hit
the *oldest* records are dropped and counted (:attr:`BufferedPublisher.dropped`, which
the agent reports in ``NodeStatus.samples_dropped``). Delivery is at-least-once.

>>> t = MemoryTransport()
>>> p = BufferedPublisher(t, buffer_max=2)
>>> for v in (b"1", b"2", b"3"):
...     p.publish("topic", b"k", v)
>>> p.flush(1.0), p.dropped, [r.value for r in t.records]
(0, 1, [b'2', b'3'])
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from agents.spill import Record, Spill

__all__ = [
    "BufferedPublisher",
    "KafkaTransport",
    "MemoryTransport",
    "Record",
    "StdoutTransport",
    "Transport",
    "TransportError",
]

log = logging.getLogger(__name__)


class TransportError(Exception):
    """The transport could not send (broker unreachable, timeout...)."""


class Transport(Protocol):
    def send(self, records: Sequence[Record], timeout_s: float) -> int:
        """Send ``records`` in order; return how many, from the front, were acknowledged.

        Raise :class:`TransportError` when none could be sent.
        """
        ...

    def close(self) -> None: ...


class MemoryTransport:
    """In-memory twin of a broker, for tests and benchmarks.

    ``down=True`` makes every send fail; ``keep=False`` only counts (bounded memory).
    """

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.records: list[Record] = []
        self.sent = 0
        self.down = False
        self.attempts = 0

    def send(self, records: Sequence[Record], timeout_s: float) -> int:
        self.attempts += 1
        if self.down:
            raise TransportError("memory transport is down")
        if self.keep:
            self.records.extend(records)
        self.sent += len(records)
        return len(records)

    def close(self) -> None:
        pass


class StdoutTransport:
    """``--dry-run``: one JSON line per record, ``{"topic", "key", "message"}``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def send(self, records: Sequence[Record], timeout_s: float) -> int:
        try:
            for r in records:
                line = json.dumps(
                    {"topic": r.topic, "key": r.key.decode(), "message": json.loads(r.value)},
                    separators=(",", ":"),
                )
                self.stream.write(line + "\n")
            self.stream.flush()
        except OSError as exc:  # a closed pipe: keep the records, like a broker that is away
            raise TransportError(f"cannot write to stdout: {exc}") from None
        return len(records)

    def close(self) -> None:
        pass


class KafkaTransport:
    """kafka-python producer, created lazily so an absent broker is just a failed send.

    ``on_connect`` runs once each time a producer is created (the agent makes sure the
    topics exist with the configured partitions there); if it raises, the send fails.

    On a failure the producer is closed without waiting (dropping what it holds, which
    is still in our buffer) and created again on the next try, so the library's own
    buffer never grows behind our back.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "gpuhint-agent",
        on_connect: Callable[[], None] | None = None,
        **config: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.on_connect = on_connect
        self.config = {
            "client_id": client_id,
            "acks": "all",
            "linger_ms": 20,
            "compression_type": None,
            "bootstrap_timeout_ms": 5000,
            "max_block_ms": 5000,
            "request_timeout_ms": 10000,
            "delivery_timeout_ms": 30000,
            **config,
        }
        self._producer: Any = None

    def _get(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer
            from kafka.errors import KafkaError

            from streams.kafka_io import (
                KafkaSecurityMismatch,
                probe_broker,
                redact_secrets_in_logs,
            )

            try:  # a broker that answers but not in our security protocol: say so at once
                probe_broker(self.bootstrap, self.config, 5.0)
            except KafkaSecurityMismatch as exc:
                raise TransportError(str(exc)) from None
            redact_secrets_in_logs()  # the producer logs its configuration at DEBUG
            try:
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap.split(","), **self.config
                )
            except KafkaError as exc:
                raise TransportError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from None
            if self.on_connect is not None:
                try:
                    self.on_connect()
                except Exception as exc:
                    self._reset()
                    raise TransportError(f"Kafka at {self.bootstrap}: {exc}") from None
        return self._producer

    def send(self, records: Sequence[Record], timeout_s: float) -> int:
        from kafka.errors import KafkaError

        producer = self._get()
        futures = []
        try:
            for r in records:
                futures.append(producer.send(r.topic, key=r.key, value=r.value))
            producer.flush(timeout=max(0.1, timeout_s))
        except KafkaError as exc:
            self._reset()
            if not futures or not futures[0].is_done or futures[0].failed():
                raise TransportError(f"Kafka send failed: {exc}") from None
        acked = 0
        for f in futures:
            if f.is_done and f.succeeded():
                acked += 1
            else:
                break
        if acked == 0 and records:
            err = futures[0].exception if futures and futures[0].is_done else "timeout"
            self._reset()
            raise TransportError(f"Kafka send failed: {err}")
        if acked < len(futures):
            self._reset()
        return acked

    def _reset(self) -> None:
        if self._producer is not None:
            _close_producer(self._producer, 0)
            self._producer = None

    def close(self) -> None:
        if self._producer is not None:
            try:
                _close_producer(self._producer, 5)
            finally:
                self._producer = None


def _close_producer(producer: Any, timeout_s: float) -> None:
    """Close a kafka-python producer, even one whose records cannot be delivered.

    kafka-python 3's ``close`` raises from its own ``flush`` when records are pending, and
    its ``__del__`` then raises again (a traceback on stderr): force the sender down.
    """
    try:
        producer.close(timeout=timeout_s)
    except Exception:  # closing a broken producer must never take the caller down
        log.debug("error closing the Kafka producer", exc_info=True)
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            try:
                sender.force_close()
            except Exception:
                log.debug("error stopping the Kafka sender", exc_info=True)
        producer._closed = True  # nothing left to close: __del__ must not try again


class BufferedPublisher:
    """Bounded, retrying publisher over a :class:`Transport`; see the module docstring.

    ``buffer_max`` bounds the memory buffer (records). With ``spill_dir``, a full buffer
    moves its oldest half to a disk segment instead of dropping, up to
    ``spill_max_records`` on disk (default ``10 * buffer_max``); segments left by a
    previous run are sent first; a corrupt one is quarantined (:mod:`agents.spill`), its
    lost lines counted in :attr:`corrupt` and :attr:`dropped`. Retries back off from
    ``retry_initial_s`` doubling to ``retry_max_s``.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        buffer_max: int = 10_000,
        spill_dir: str | Path | None = None,
        spill_max_records: int | None = None,
        batch_max: int = 500,
        send_timeout_s: float = 10.0,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if buffer_max < 1:
            raise ValueError("buffer_max must be at least 1")
        self.transport = transport
        self.buffer_max = buffer_max
        self.batch_max = batch_max
        self.send_timeout_s = send_timeout_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.clock = clock
        self._buf: deque[Record] = deque()
        self.dropped = 0
        self.corrupt = 0
        """Records lost in corrupt (or deleted) spill segments (also in :attr:`dropped`)."""
        self._spill = (
            Spill(Path(spill_dir), spill_max_records or 10 * buffer_max, self._count_corrupt)
            if spill_dir
            else None
        )
        self.sent = 0
        self.failures = 0
        self._backoff = 0.0
        self._next_try = 0.0
        self._down_since: float | None = None
        self._last_log = 0.0
        self.log_every_s = 60.0
        self._abort = False

    @property
    def pending(self) -> int:
        """Records not yet acknowledged (memory + disk)."""
        return len(self._buf) + (self._spill.count if self._spill else 0)

    @property
    def in_memory(self) -> int:
        """Records neither acknowledged nor on disk: what a crash now would lose."""
        return len(self._buf)

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """Buffer one record; never blocks, never grows past the bound."""
        if len(self._buf) >= self.buffer_max:
            if self._spill is not None:
                chunk = max(1, self.buffer_max // 2)
                out = [self._buf.popleft() for _ in range(min(chunk, len(self._buf)))]
                try:
                    lost = self._spill.write(out)
                except OSError as exc:
                    log.error("cannot spill to %s: %s; dropping oldest", self._spill.dir, exc)
                    lost = len(out)
                self._count_drop(lost)
            else:
                self._buf.popleft()
                self._count_drop(1)
        self._buf.append(Record(topic, key, value))

    def _count_corrupt(self, n: int) -> None:
        self.corrupt += n
        self.dropped += n

    def _count_drop(self, n: int) -> None:
        if n <= 0:
            return
        if self.dropped == 0 or (self.dropped + n) // 1000 > self.dropped // 1000:
            log.warning("buffer full: dropped %d oldest record(s) so far", self.dropped + n)
        self.dropped += n

    def pump(self, *, force: bool = False, budget_s: float | None = None) -> int:
        """Send what is buffered, unless backing off (``force`` ignores the backoff), for
        at most ``budget_s`` seconds (no send is given a timeout past it).

        Returns the number of records acknowledged.
        """
        if not force and self.clock() < self._next_try:
            return 0
        deadline = None if budget_s is None else self.clock() + budget_s
        sent = 0
        tried = False
        while self.pending and not self._abort:
            timeout_s = self.send_timeout_s
            if deadline is not None:
                left = deadline - self.clock()
                if left <= 0:
                    break
                timeout_s = min(timeout_s, left)
            tried = True
            try:
                n = self._send_some(timeout_s)
            except TransportError as exc:
                self._failed(exc)
                return sent
            except OSError as exc:  # e.g. a spill segment that cannot be read back
                self._failed(TransportError(f"{type(exc).__name__}: {exc}"))
                return sent
            sent += n
            if n == 0:
                break
        if not tried:
            return 0
        if self._down_since is not None:
            log.warning("transport back after %.0f s", self.clock() - self._down_since)
            self._down_since = None
        self._backoff = 0.0
        self._next_try = 0.0
        return sent

    def _send_some(self, timeout_s: float) -> int:
        spill = self._spill
        records = spill.head() if spill is not None else []  # quarantines corrupt segments
        if spill is not None and records:  # spilled records go first
            n = self.transport.send(records, timeout_s)
            spill.consume_head(n, records)
        else:
            batch = [self._buf[i] for i in range(min(self.batch_max, len(self._buf)))]
            n = self.transport.send(batch, timeout_s)
            for _ in range(n):
                self._buf.popleft()
        self.sent += n
        return n

    def _failed(self, exc: TransportError) -> None:
        self.failures += 1
        now = self.clock()
        self._backoff = min(
            self.retry_max_s, self._backoff * 2 if self._backoff else self.retry_initial_s
        )
        self._next_try = now + self._backoff
        if self._down_since is None:
            self._down_since = self._last_log = now
            log.warning("%s; buffering (%d pending), retrying", exc, self.pending)
        elif now - self._last_log >= self.log_every_s:  # rate-limited: one line a minute
            self._last_log = now
            log.warning(
                "transport still down after %.0f s (%d pending, %d dropped): %s",
                now - self._down_since,
                self.pending,
                self.dropped,
                exc,
            )
        else:
            log.debug("%s; retry in %.1f s (%d pending)", exc, self._backoff, self.pending)

    def flush(self, timeout_s: float) -> int:
        """Try to send everything within ``timeout_s``; return how many are still pending."""
        if not timeout_s >= 0:  # NaN too: it would make the deadline pass at once
            raise ValueError(f"timeout_s must be a number >= 0, got {timeout_s}")
        deadline = self.clock() + timeout_s
        while self.pending and self.clock() < deadline and not self._abort:
            before = self.pending
            self.pump(force=True, budget_s=deadline - self.clock())
            if self.pending and self.pending >= before:
                time.sleep(min(0.5, max(0.0, deadline - self.clock())))
        return self.pending

    def abort_flush(self) -> None:
        """Stop a :meth:`flush` in progress (after the send under way) and any later
        sending; :meth:`close` then keeps the rest at once. Safe in a signal handler."""
        self._abort = True

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush, then keep what is left on disk (with a spill dir) or count it as dropped.

        Returns the number of records lost.
        """
        left = self.flush(timeout_s)
        lost = 0
        if left and self._buf:
            if self._spill is not None:
                try:
                    lost = self._spill.write(list(self._buf))
                    log.warning("%d unsent record(s) kept in %s", len(self._buf), self._spill.dir)
                except OSError as exc:
                    log.error("cannot spill to %s: %s", self._spill.dir, exc)
                    lost = len(self._buf)
            else:
                lost = len(self._buf)
                log.warning("%d unsent record(s) lost at exit", lost)
            self._buf.clear()
            self.dropped += lost
        try:
            self.transport.close()
        except Exception as exc:  # never fail the shutdown on the transport
            log.warning("closing the transport: %s", exc)
        if self._spill is not None:
            self._spill.close()
        return lost
