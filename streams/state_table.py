"""Per-VC state kept in a changelog-backed table: a cache of live objects over bytes.

The Faust table holds each VC's :class:`~gpuhint.core.VcState` as bytes (a versioned,
zlib-compressed pickle). The engine works on live objects in :class:`TableStates`'s
cache; every assignment marks a key dirty, and :meth:`TableStates.save_dirty` encodes
the dirty keys once per save (the worker saves at most every ``state_save_interval_s``
and holds the acknowledgements of the events in between, :class:`SaveCadence`). So the
changelog gets one record per VC touched per save, not one per event or batch.

This module is pure: ``backing`` is any ``MutableMapping[str, bytes]`` and ``on_save`` an
optional callback (the worker's writes the changelog record on the VC's partition).

>>> from gpuhint.core import VcState
>>> from models.history import HistoryEstimator
>>> table: dict[str, bytes] = {}
>>> states = TableStates(table)
>>> states["c/v"] = VcState(model=HistoryEstimator(), applied_offset=3)
>>> states.save_dirty(), list(table)
(1, ['c/v'])
>>> TableStates(table)["c/v"].applied_offset
3
"""

from __future__ import annotations

import logging
import math
import pickle
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Generic, TypeVar

from gpuhint.core import VcState

log = logging.getLogger(__name__)

T = TypeVar("T")

MAGIC = b"GHVS1"
"""Format tag of an encoded VcState: magic, one byte (0 raw, 1 zlib), the pickle."""


class StateCodecError(ValueError):
    """Bytes in the state table that are not a VcState this build can read."""


def encode_state(state: VcState, compress: bool = True) -> bytes:
    return seal(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), compress)


def seal(raw: bytes, compress: bool = True) -> bytes:
    """A pickled VcState as table bytes (zlib releases the GIL: run it off the lock)."""
    if compress:
        return MAGIC + b"\x01" + zlib.compress(raw, 1)
    return MAGIC + b"\x00" + raw


def decode_state(blob: bytes) -> VcState:
    """Decode :func:`encode_state`'s bytes (only read tables you wrote: this unpickles)."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 1:
        raise StateCodecError("not a gpuhint VC state (bad magic)")
    flag, body = blob[len(MAGIC)], blob[len(MAGIC) + 1 :]
    try:
        raw = zlib.decompress(body) if flag == 1 else body
        state = pickle.loads(raw)
    except Exception as exc:
        raise StateCodecError(f"corrupt VC state: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, VcState):
        raise StateCodecError(f"table value is a {type(state).__name__}, not a VcState")
    return state


class TableStates(MutableMapping[str, VcState]):
    """Live VcState objects over a table of bytes; dirty keys saved in one go."""

    def __init__(
        self,
        backing: MutableMapping[str, bytes],
        on_save: Callable[[str, bytes], None] | None = None,
        compress: bool = True,
    ) -> None:
        self.backing = backing
        self.on_save = on_save
        self.compress = compress
        self._cache: dict[str, VcState] = {}
        self._dirty: set[str] = set()
        self._changes: dict[str, int] = {}
        """key -> assignments so far; an encoded record stores clean only if none since."""
        self._encoded_at: dict[str, int] = {}
        self.bytes_saved = 0
        self.saves = 0

    def __getitem__(self, key: str) -> VcState:
        st = self._cache.get(key)
        if st is not None:
            return st
        blob = self.backing[key]  # KeyError when absent
        try:
            st = decode_state(blob)
        except StateCodecError as exc:  # never crash-loop on one bad record: start afresh
            log.error("state of %s unreadable (%s); the VC starts from an empty state", key, exc)
            raise KeyError(key) from None
        self._cache[key] = st
        return st

    def get(self, key: str, default: VcState | None = None) -> VcState | None:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: VcState) -> None:
        self._cache[key] = value
        self._dirty.add(key)
        self._changes[key] = self._changes.get(key, 0) + 1

    def __delitem__(self, key: str) -> None:
        self._cache.pop(key, None)
        self._dirty.discard(key)
        del self.backing[key]

    def __iter__(self) -> Iterator[str]:
        return iter(set(self.backing) | set(self._cache))

    def __len__(self) -> int:
        return len(set(self.backing) | set(self._cache))

    @property
    def dirty(self) -> frozenset[str]:
        return frozenset(self._dirty)

    def save_dirty(self) -> int:
        """Encode every dirty key into the backing table; return how many."""
        return self.store_encoded(self.encode_dirty())

    def encode_dirty(self, keys: Iterable[str] | None = None) -> list[tuple[str, bytes]]:
        """Encode the dirty keys (of ``keys``, default all); pass the result to
        :meth:`store_encoded`. ``seal_all(pickle_dirty(keys))``."""
        return self.seal_all(self.pickle_dirty(keys))

    def pickle_dirty(self, keys: Iterable[str] | None = None) -> list[tuple[str, bytes]]:
        """Pickle the dirty keys (of ``keys``, default all): the snapshot, taken while
        nothing mutates the states (it may run in a thread meanwhile); what happens to a
        key after it does not go into this snapshot's record."""
        todo = self._dirty if keys is None else self._dirty.intersection(keys)
        out = []
        for key in sorted(todo):
            st = self._cache.get(key)  # None: forgotten meanwhile (a rebalance)
            if st is not None:
                out.append((key, pickle.dumps(st, protocol=pickle.HIGHEST_PROTOCOL)))
                self._encoded_at[key] = self._changes.get(key, 0)
        return out

    def seal_all(self, pickled: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """:meth:`pickle_dirty`'s snapshot as table bytes (compressed): touches no
        state, so it runs in a thread while batches go on."""
        return [(key, seal(raw, self.compress)) for key, raw in pickled]

    def store_encoded(self, encoded: list[tuple[str, bytes]]) -> int:
        """Write :meth:`encode_dirty`'s records (``on_save`` or the table); a key is
        clean unless it changed after its snapshot."""
        for key, blob in encoded:
            if self.on_save is not None:
                self.on_save(key, blob)
            else:
                self.backing[key] = blob
            self.bytes_saved += len(blob)
            if self._encoded_at.pop(key, None) == self._changes.get(key, 0):
                self._dirty.discard(key)
        self.saves += len(encoded)
        return len(encoded)

    def forget(self) -> None:
        """Drop live objects and unsaved changes (a rebalance): re-read from the table."""
        self._cache.clear()
        self._dirty.clear()
        self._encoded_at.clear()


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
