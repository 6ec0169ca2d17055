"""The store's flush as the batch routine runs it: off the event loop, retried while the
sink is down, and followed by a rebuild when the sink does not hold this process's hints.

Redis (the sink) says which data it holds by its *epoch* marker (a random value created
by the first flush into an empty Redis, :class:`~gpuhint.cores.sink.BufferedStore`). The
pending hints of a partition's VCs are in Redis when the process that owns the
partition wrote them under the marker Redis holds now. :class:`Sink` remembers, for each
partition, the epoch under which this process last wrote all of them; a flush that finds
an owned partition it has not written under the current epoch rewrites the owned VCs'
pending hints from their state (``rebuild()``). So:

* Redis came back empty (the marker was gone or replaced): every worker rebuilds, the
  one that re-created the marker (it had to) and the others (the marker they knew is
  gone) -- a ``rebuilt`` change announces it (reason ``redis_empty``);
* Redis came back from an older snapshot (RDB/AOF: the marker is there, the last
  writes are not): each worker whose acknowledged writes are missing rebuilds (reason
  ``redis_rollback``, also announced);
* a process's first flush (it cannot know what happened to Redis since its state was
  saved: another worker may have re-created the marker meanwhile) and a partition newly
  assigned to it (its previous owner may have died before it could rebuild) rebuild
  too, without a ``rebuilt`` change (reason ``epoch_unknown``: nothing was lost that
  this process knows of; the hints are idempotent writes).

>>> import asyncio
>>> from gpuhint.cores.sink import InMemoryStore
>>> store = InMemoryStore()
>>> sink = Sink(store, lambda: 0)
>>> store.count("x"); asyncio.run(sink.flush())
>>> sink.rebuilds, store.changes[-1].type  # a fresh Redis: its marker was created
(1, 'rebuilt')
>>> sink2 = Sink(store, lambda: 0)  # another process: the marker exists
>>> asyncio.run(sink2.flush()); sink2.rebuilds, sink2.catch_ups
(0, 1)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from gpuhint.cores.sink import BufferedStore

log = logging.getLogger(__name__)

__all__ = ["Sink"]

_UNKNOWN = object()
"""No epoch remembered for a partition (never written by this process)."""


def _one_partition() -> Collection[int]:
    return (0,)


class Sink:
    """The store's flush, off the event loop, retried until it succeeds; ``rebuild()``
    rewrites the pending hints of the VCs this process owns when the flush finds the
    store does not hold them (module docstring). ``owned()``: the partitions this process
    owns now (default: one, everything).

    The store is flushed by this sink only (its automatic flush is turned off): call
    :meth:`flush` from the batch routine (:meth:`BatchRoutine.flush
    <gpuhint.cores.pipeline.checkpoint.BatchRoutine.flush>` outside a batch: under the
    batch lock, so a rebuild never walks a VC state a batch is changing).
    """

    def __init__(
        self,
        store: BufferedStore,
        rebuild: Callable[[], int],
        owned: Callable[[], Collection[int]] = _one_partition,
    ) -> None:
        self.store = store
        store.auto_flush = False  # only this sink flushes it, with its retries
        self.rebuild = rebuild
        self.owned = owned
        self.failures = 0
        self.rebuilds = 0
        """Rebuilds because Redis lost data (``redis_empty``, ``redis_rollback``)."""
        self.catch_ups = 0
        """Rebuilds of partitions not yet written under Redis's current epoch by this
        process (its first flush, partitions newly assigned)."""
        self.max_backoff_s = 5.0
        self.epochs: dict[int, object] = {}
        """Partition -> the epoch under which this process last rewrote its VCs."""

    async def flush(self) -> None:
        delay = 0.05
        while True:
            try:
                await asyncio.to_thread(self._flush_once)
                return
            except Exception as exc:  # Redis down: hold the batch (and its offsets), retry
                self.failures += 1
                log.warning(
                    "store flush failed (%s: %s); %d writes held, retrying in %.2f s",
                    type(exc).__name__,
                    exc,
                    self.store.pending,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(self.max_backoff_s, delay * 2)

    def stale(self) -> list[int]:
        """Owned partitions not rewritten by this process under the current epoch."""
        epoch = self.store.epoch_seen
        return sorted(p for p in self.owned() if self.epochs.get(p, _UNKNOWN) != epoch)

    def _flush_once(self) -> None:
        store = self.store
        store.flush()
        if store.epoch_seen is None:  # nothing was written yet: ask for the marker
            store.read_epoch()
        stale = self.stale()
        empty = store.empty_detected
        if not empty and not stale:
            return
        parts = set(self.owned())
        n = self.rebuild()  # if it raises, nothing is marked: retried with the flush
        store.take_empty()
        if empty:
            self.rebuilds += 1
            if n:  # Redis lost what it held (a restart without persistence or from an
                # older snapshot, a flush)
                log.warning("re-wrote %d pending hints from state (%s)", n, store.empty_reason)
            else:  # a first start, or nothing was waiting: not an alarm
                log.info("Redis holds no gpuhint data of ours (%s); nothing waiting to re-write",
                         store.empty_reason)  # fmt: skip
            store.mark_rebuilt(n)
        else:
            self.catch_ups += 1
            log.info(
                "re-wrote %d pending hints from state (epoch_unknown: partitions %s)", n, stale
            )
        epoch = store.epoch_seen
        store.flush()
        for p in parts:
            self.epochs[p] = epoch
