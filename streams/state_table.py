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
    raw = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
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

    def encode_dirty(self) -> list[tuple[str, bytes]]:
        """Encode the dirty keys (no side effect: may run in a thread while nothing
        mutates the states); pass the result to :meth:`store_encoded`."""
        return [(key, encode_state(self._cache[key], self.compress)) for key in sorted(self._dirty)]

    def store_encoded(self, encoded: list[tuple[str, bytes]]) -> int:
        """Write :meth:`encode_dirty`'s records (``on_save`` or the table); mark them clean."""
        for key, blob in encoded:
            if self.on_save is not None:
                self.on_save(key, blob)
            else:
                self.backing[key] = blob
            self.bytes_saved += len(blob)
            self._dirty.discard(key)
        self.saves += len(encoded)
        return len(encoded)

    def forget(self) -> None:
        """Drop live objects and unsaved changes (a rebalance): re-read from the table."""
        self._cache.clear()
        self._dirty.clear()


class SaveCadence(Generic[T]):
    """Acknowledgements held back until the state they changed is saved.

    The worker handles a batch, flushes its Redis writes, then holds (:meth:`hold`) the
    batch's events instead of acknowledging them. When :meth:`due` (the oldest held
    event has waited ``interval_s``) it saves the dirty state and only then calls
    :meth:`saved`, which acknowledges every held event: no offset is committed whose
    state is not in the changelog. A crash before the save redelivers the held events;
    they are re-applied to the older saved state and re-emit the same (idempotent)
    writes.

    >>> acked, now = [], [0.0]
    >>> c = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    >>> c.hold(["e1", "e2"]); c.due()
    False
    >>> now[0] = 1.0; c.due(), c.saved(), acked, c.held
    (True, 2, ['e1', 'e2'], 0)
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
        self._held: list[T] = []
        self._since: float | None = None
        self.saves = 0

    @property
    def held(self) -> int:
        return len(self._held)

    def hold(self, items: Iterable[T]) -> None:
        """Hold these (handled, flushed) items' acknowledgements until the next save."""
        before = len(self._held)
        self._held.extend(items)
        if self._since is None and len(self._held) > before:
            self._since = self.clock()

    def due(self) -> bool:
        """True when the oldest held item has waited ``interval_s``."""
        return self._since is not None and self.clock() - self._since >= self.interval_s

    def saved(self) -> int:
        """The state of every held item is saved: acknowledge them; return how many."""
        held, self._held, self._since = self._held, [], None
        for item in held:
            self._ack(item)
        self.saves += 1
        return len(held)

    def drop(self) -> int:
        """Forget the held items without acknowledging them (their state was dropped)."""
        n = len(self._held)
        self._held, self._since = [], None
        return n
