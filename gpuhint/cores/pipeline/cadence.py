"""Acknowledgements held back until the VC state they changed is saved (the save cadence).

Pure: part of the worker's checkpoint order (:mod:`gpuhint.cores.pipeline.checkpoint`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class SaveCadence(Generic[T]):
    """Acknowledgements held back until the state they changed is saved, per VC.

    The worker handles a batch, flushes its Redis writes, then holds (:meth:`hold`) each
    event under the key of the VC state it changed instead of acknowledging it. A key is
    :meth:`due` once its oldest held event has waited ``interval_s``; the worker saves
    the due VCs one at a time (a deep VC's encode stalls one VC's worth, not all) and
    after each calls :meth:`saved` for that key, which acknowledges its events: no
    offset is committed whose state is not in the changelog (Faust commits a partition
    up to its lowest unacknowledged offset). A crash before the save redelivers the
    held events; they are re-applied to the older saved state and re-emit the same
    (idempotent) writes.

    >>> acked, now = [], [0.0]
    >>> c = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    >>> c.hold(["e1", "e2"], "c/a"); now[0] = 0.5; c.hold(["e3"], "c/b"); c.due()
    False
    >>> now[0] = 1.0; c.due(), c.due_keys()
    (True, ['c/a'])
    >>> c.saved(["c/a"]), acked, c.held
    (2, ['e1', 'e2'], 1)
    """

    def __init__(
        self,
        ack: Callable[[T], None],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ack = ack
        self.interval_s = interval_s
        self.clock = clock
        self._held: dict[str, tuple[float, list[T]]] = {}
        """key -> (when its oldest held item was held, the items); oldest key first."""
        self.saves = 0

    @property
    def held(self) -> int:
        return sum(len(items) for _, items in self._held.values())

    def keys(self) -> list[str]:
        """Every key with held events, oldest first."""
        return list(self._held)

    def hold(self, items: Iterable[T], key: str) -> None:
        """Hold these (handled, flushed) items' acknowledgements until ``key`` is saved."""
        got = list(items)
        if not got:
            return
        entry = self._held.get(key)
        if entry is None:
            self._held[key] = (self.clock(), got)
        else:
            entry[1].extend(got)

    def due_keys(self) -> list[str]:
        """Keys whose oldest held item has waited ``interval_s``, oldest first."""
        now = self.clock()
        return [k for k, (since, _) in self._held.items() if now - since >= self.interval_s]

    def due(self) -> bool:
        """True when some key's oldest held item has waited ``interval_s``."""
        return bool(self.due_keys())

    def paced_due_keys(self, tick_s: float) -> list[str]:
        """The due keys to save in one tick of ``tick_s``, oldest first: at most twice
        this tick's even share of the held keys, ``ceil(2 * keys * tick_s / interval_s)``.

        Keys held from the same moment fall due together; saving them all at once
        stalls the batches behind one encode after another. Paced, the saves spread
        over the interval (and stay spread: a key's next interval starts when it is
        next held), while twice the needed rate still catches up with a backlog.

        >>> now = [0.0]
        >>> c = SaveCadence(lambda e: None, 1.0, clock=lambda: now[0])
        >>> for k in "abcdefgh": c.hold([k], k)
        >>> now[0] = 1.0; c.paced_due_keys(0.05), len(c.due_keys())
        (['a'], 8)
        """
        keys = self.due_keys()
        if self.interval_s <= 0:
            return keys
        share = math.ceil(2 * len(self._held) * tick_s / self.interval_s)
        return keys[: max(1, share)]

    def saved(self, keys: Iterable[str] | None = None) -> int:
        """The state of ``keys`` (default: every held key) is saved: acknowledge their
        items; return how many."""
        n = 0
        for key in list(self._held) if keys is None else list(keys):
            n += self.ack(self.take(key))
        return n

    def take(self, key: str) -> list[T]:
        """The items held under ``key`` now (its snapshot is being taken), no longer
        held: :meth:`ack` them once that snapshot is saved, or drop them (a crash or a
        rebalance redelivers them). Later items start a new clock for ``key``.

        >>> acked = []
        >>> c = SaveCadence(acked.append, 1.0)
        >>> c.hold(["e1"], "c/a"); items = c.take("c/a"); c.hold(["e2"], "c/a")
        >>> c.ack(items), acked, c.held
        (1, ['e1'], 1)
        """
        _, items = self._held.pop(key, (0.0, []))
        return items

    def ack(self, items: Iterable[T]) -> int:
        """Acknowledge taken items (their state is saved); return how many."""
        n = 0
        for item in items:
            self._ack(item)
            n += 1
        self.saves += 1
        return n

    def drop(self) -> int:
        """Forget the held items without acknowledging them (their state was dropped)."""
        n = self.held
        self._held = {}
        return n
