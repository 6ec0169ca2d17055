"""Per-VC state kept in a changelog-backed table: a cache of live objects over bytes.

The Faust table holds each VC's :class:`~gpuhint.cores.qssf.VcState` as bytes (a versioned,
zlib-compressed pickle). The engine works on live objects in :class:`TableStates`'s
cache; every assignment marks a key dirty, and :meth:`TableStates.save_dirty` encodes
the dirty keys once per save (the worker saves at most every ``state_save_interval_s``
and holds the acknowledgements of the events in between, :class:`SaveCadence`). So the
changelog gets one record per VC touched per save, not one per event or batch.

Two bounds keep one deep VC or many VCs from taking the worker down:

* **Record size.** A sealed state longer than ``max_record_bytes`` (default 512 KiB,
  well under Kafka's 1 MB default ``message.max.bytes``) is split: its parts go under
  derived keys (:func:`part_key`: ``<key>:part:<generation>:<i>``; a VC key never holds
  ``:``, no :data:`gpuhint.wire.contract.Name` may), and then a small header
  (:data:`SPLIT_MAGIC`: generation, part count, total length, crc32) under the VC's
  own key. The parts are written before the header and the previous generation's parts
  deleted after it, so a crash anywhere in between leaves the previous or the new
  generation readable; a header whose parts are missing or fail the checksum is an
  unreadable record (logged; the VC starts from an empty state). Parts left by such a
  crash are deleted by the VC's next save.
* **Live states.** At most ``max_live`` decoded states stay in the cache: past that,
  the least recently used *clean* ones are dropped and decoded again from the table
  when next used. A dirty state, or one whose snapshot is being encoded, is never
  dropped (between saves the cache can hold more of them).

This module is pure: ``backing`` is any ``MutableMapping[str, bytes]``, ``on_save`` and
``on_delete`` optional callbacks (the worker's write a changelog record, or a
tombstone, on the VC's partition: :func:`owner_key` names the VC of a part key).

>>> from gpuhint.cores.qssf import VcState
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
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TypeVar

from gpuhint.cores.qssf import VcState
from gpuhint.wire import pickles

log = logging.getLogger(__name__)

T = TypeVar("T")

MAGIC = b"GHVS1"
"""Format tag of an encoded VcState: magic, one byte (0 raw, 1 zlib), the pickle."""

SPLIT_MAGIC = b"GHVP1"
"""Format tag of a split record's header: magic, then the generation (u64), the part
count (u32), the total length (u64) and the crc32 (u32) of the sealed state its parts
join into, big-endian (:class:`SplitHeader`)."""

_SPLIT = struct.Struct(">QIQI")

PART_MARK = ":part:"
"""Between a VC key and a part's generation and index (:func:`part_key`)."""

DEFAULT_MAX_RECORD_BYTES = 512 * 1024
"""Longest record written (Kafka refuses records over ``message.max.bytes``, 1 MB)."""

DEFAULT_MAX_LIVE = 2000
"""Decoded states kept live (~20 KB each), besides dirty ones."""


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
        state = pickles.loads(raw)
    except Exception as exc:
        raise StateCodecError(f"corrupt VC state: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, VcState):
        raise StateCodecError(f"table value is a {type(state).__name__}, not a VcState")
    return state


def part_key(key: str, generation: int, index: int) -> str:
    """The table key of part ``index`` of generation ``generation`` of ``key``'s record.

    >>> part_key("venus/vc1", 3, 0), owner_key(part_key("venus/vc1", 3, 0))
    ('venus/vc1:part:3:0', 'venus/vc1')
    """
    return f"{key}{PART_MARK}{generation}:{index}"


def is_part_key(key: str) -> bool:
    return PART_MARK in key


def owner_key(key: str) -> str:
    """The VC key a table key belongs to: itself, or the VC of a part key (the part's
    changelog record goes to that VC's partition)."""
    return key.partition(PART_MARK)[0]


@dataclass(frozen=True)
class SplitHeader:
    """What a split record's header says: which parts, and what they join into."""

    generation: int
    parts: int
    length: int
    crc32: int

    def encode(self) -> bytes:
        return SPLIT_MAGIC + _SPLIT.pack(self.generation, self.parts, self.length, self.crc32)

    @classmethod
    def decode(cls, blob: bytes) -> SplitHeader | None:
        """The header ``blob`` is, None when it is no header (a whole record)."""
        if not blob.startswith(SPLIT_MAGIC):
            return None
        if len(blob) != len(SPLIT_MAGIC) + _SPLIT.size:
            raise StateCodecError(f"split header of {len(blob)} bytes")
        return cls(*_SPLIT.unpack_from(blob, len(SPLIT_MAGIC)))


class SplitRecords:
    """Records of at most ``max_record_bytes`` over a table of bytes: a longer one is
    written as parts and a header (module docstring), read back joined. ``put`` and
    ``delete`` write to the table (a changelog-backed one routes a part key to its
    owner's partition, :func:`owner_key`). Used for VC states and CES checkpoints.

    >>> table = {}
    >>> rec = SplitRecords(table, table.__setitem__, table.__delitem__, max_record_bytes=64)
    >>> rec.write("venus", b"x" * 150)
    3
    >>> sorted(table), rec.read("venus") == b"x" * 150
    (['venus', 'venus:part:1:0', 'venus:part:1:1', 'venus:part:1:2'], True)
    >>> rec.write("venus", b"short"), sorted(table), rec.read("venus")
    (0, ['venus'], b'short')
    """

    def __init__(
        self,
        backing: Mapping[str, bytes],
        put: Callable[[str, bytes], None],
        delete: Callable[[str], None],
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        if max_record_bytes < 64:
            raise ValueError(f"max_record_bytes={max_record_bytes}: at least 64")
        self.backing = backing
        self.put = put
        self.delete = delete
        self.max_record_bytes = max_record_bytes

    def read(self, key: str) -> bytes | None:
        """The record of ``key`` (joined), None when absent; :class:`StateCodecError`
        when a split one is broken."""
        blob = self.backing.get(key)
        return None if blob is None else self.join(key, blob)

    def join(self, key: str, blob: bytes) -> bytes:
        """The record of ``key`` whose stored bytes are ``blob`` (joined, if a header)."""
        header = SplitHeader.decode(blob)
        if header is None:
            return blob
        chunks = []
        for i in range(header.parts):
            try:
                chunks.append(self.backing[part_key(key, header.generation, i)])
            except KeyError:
                raise StateCodecError(
                    f"split record generation {header.generation}: "
                    f"part {i} of {header.parts} missing"
                ) from None
        joined = b"".join(chunks)
        if len(joined) != header.length or zlib.crc32(joined) != header.crc32:
            raise StateCodecError(
                f"split record generation {header.generation}: {len(joined)} bytes joined "
                f"of {header.length}, or a bad checksum"
            )
        return joined

    def old_header(self, key: str) -> SplitHeader | None:
        try:
            return SplitHeader.decode(self.backing[key])
        except (KeyError, StateCodecError):
            return None

    def write(self, key: str, blob: bytes) -> int:
        """Write ``key``'s record: whole, or parts then a header; then delete the parts
        no header names any more (the superseded generation's, and those a crash may
        have left: the generation before it, an unfinished attempt at the next).
        Returns the number of parts (0: written whole)."""
        old = self.old_header(key)
        attempt = 1 if old is None else old.generation + 1
        if len(blob) <= self.max_record_bytes:
            self.put(key, blob)
            written = 0
        else:
            step = self.max_record_bytes
            written = -(-len(blob) // step)
            for i in range(written):
                self.put(part_key(key, attempt, i), blob[i * step : (i + 1) * step])
            self.put(key, SplitHeader(attempt, written, len(blob), zlib.crc32(blob)).encode())
        if old is not None:
            self.delete_parts(key, old.generation, range(old.parts))
            if old.generation > 1:
                self.delete_run(key, old.generation - 1, 0)
        self.delete_run(key, attempt, written)
        return written

    def delete_parts(self, key: str, generation: int, indexes: Iterable[int]) -> None:
        for i in indexes:
            pk = part_key(key, generation, i)
            if pk in self.backing:
                self.delete(pk)

    def delete_run(self, key: str, generation: int, start: int) -> None:
        """Delete parts ``start``, ``start + 1``, ... of ``generation`` while there are."""
        i = start
        while part_key(key, generation, i) in self.backing:
            self.delete(part_key(key, generation, i))
            i += 1


class TableStates(MutableMapping[str, VcState]):
    """Live VcState objects over a table of bytes; dirty keys saved in one go.

    ``on_save(key, blob)`` writes a record (default: ``backing[key] = blob``) and
    ``on_delete(key)`` deletes one (default: from ``backing``); either may be called
    with a part key (:func:`owner_key`). ``max_record_bytes`` is the longest record
    written (longer states are split), ``max_live`` how many decoded states are kept
    besides dirty ones (module docstring). Iteration and ``len`` list VC keys only.
    """

    def __init__(
        self,
        backing: MutableMapping[str, bytes],
        on_save: Callable[[str, bytes], None] | None = None,
        compress: bool = True,
        *,
        on_delete: Callable[[str], None] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_live: int = DEFAULT_MAX_LIVE,
    ) -> None:
        if max_live < 1:
            raise ValueError(f"max_live={max_live}: at least 1")
        self.backing = backing
        self.on_save = on_save
        self.on_delete = on_delete
        self.compress = compress
        self.max_record_bytes = max_record_bytes
        self.max_live = max_live
        self.records = SplitRecords(backing, self._put, self._delete, max_record_bytes)
        self._cache: dict[str, VcState] = {}
        """key -> live state, least recently used first."""
        self._dirty: set[str] = set()
        self._changes: dict[str, int] = {}
        """key -> assignments since it was last clean; an encoded record stores clean only
        if none since its snapshot. Only dirty (or being encoded) keys are here."""
        self._encoded_at: dict[str, int] = {}
        self._ops = 0
        """Inserts and cleaned keys since the last eviction scan."""
        self._scan_due = 1
        """Ops before the next scan: a scan that had to skip many dirty states waits for
        a share of its cost in ops (never one whole scan per insert)."""
        self.bytes_saved = 0
        self.saves = 0
        self.records_written = 0
        self.split_saves = 0
        """Saves written as parts and a header."""
        self.deletes = 0
        self.loads = 0
        """States decoded from the table (first use, or again after an eviction)."""
        self.evictions = 0

    @staticmethod
    def owner_key(key: str) -> str:
        """:func:`owner_key` (the VC a table key belongs to)."""
        return owner_key(key)

    # -- the mapping -----------------------------------------------------------------------
    def __getitem__(self, key: str) -> VcState:
        st = self._cache.get(key)
        if st is not None:
            del self._cache[key]  # most recently used: to the end
            self._cache[key] = st
            return st
        if is_part_key(key):
            raise KeyError(key)
        blob = self.backing[key]  # KeyError when absent
        try:
            st = decode_state(self._join(key, blob))
        except StateCodecError as exc:  # never crash-loop on one bad record: start afresh
            log.error("state of %s unreadable (%s); the VC starts from an empty state", key, exc)
            raise KeyError(key) from None
        self._cache[key] = st
        self.loads += 1
        self._ops += 1
        self._maybe_evict(key)
        return st

    def get(self, key: str, default: VcState | None = None) -> VcState | None:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: VcState) -> None:
        if is_part_key(key):
            raise KeyError(f"{key!r} is a part key ({PART_MARK!r} in it), not a VC key")
        self._cache.pop(key, None)
        self._cache[key] = value
        self._dirty.add(key)
        self._changes[key] = self._changes.get(key, 0) + 1
        self._ops += 1
        self._maybe_evict(key)

    def __delitem__(self, key: str) -> None:
        live = self._cache.pop(key, None) is not None
        self._dirty.discard(key)
        self._changes.pop(key, None)
        self._encoded_at.pop(key, None)
        try:
            old = self.backing[key]
        except KeyError:
            if live:
                return
            raise
        self._delete(key)  # the record first: a crash leaves parts, never a broken header
        try:
            header = SplitHeader.decode(old)
        except StateCodecError:
            header = None
        if header is not None:
            self.records.delete_parts(key, header.generation, range(header.parts))

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> set[str]:
        keys = {k for k in self.backing if PART_MARK not in k}
        keys.update(self._cache)
        return keys

    @property
    def dirty(self) -> frozenset[str]:
        return frozenset(self._dirty)

    @property
    def live(self) -> int:
        """Decoded states in the cache now."""
        return len(self._cache)

    def live_keys(self) -> list[str]:
        """The keys of the decoded states, least recently used first."""
        return list(self._cache)

    # -- the LRU bound ---------------------------------------------------------------------
    def _maybe_evict(self, keep: str) -> None:
        """Past ``max_live``, drop the least recently used clean states (not ``keep``,
        the one just used) down to ``max_live`` less a sixteenth, so that scans come
        once every ``max_live // 16`` inserts, not once per insert.

        Runs only where the cache is used (under the worker's batch lock), never from
        :meth:`store_encoded`, which the worker calls while a flush may read states."""
        n = len(self._cache)
        if n <= self.max_live or self._ops < self._scan_due:
            return
        want = n - (self.max_live - self.max_live // 16)
        victims: list[str] = []
        scanned = 0
        dirty, encoding = self._dirty, self._encoded_at
        for k in self._cache:
            scanned += 1
            if k != keep and k not in dirty and k not in encoding:
                victims.append(k)
                if len(victims) >= want:
                    break
        for k in victims:
            del self._cache[k]
        self.evictions += len(victims)
        self._ops = 0
        self._scan_due = max(1, (scanned - len(victims)) // 8)

    # -- records (split when long) -----------------------------------------------------------
    def _join(self, key: str, blob: bytes) -> bytes:
        return self.records.join(key, blob)

    def _put(self, key: str, blob: bytes) -> None:
        if self.on_save is not None:
            self.on_save(key, blob)
        else:
            self.backing[key] = blob
        self.bytes_saved += len(blob)
        self.records_written += 1

    def _delete(self, key: str) -> None:
        if self.on_delete is not None:
            self.on_delete(key)
        else:
            self.backing.pop(key, None)
        self.deletes += 1

    def _write(self, key: str, blob: bytes) -> None:
        if self.records.write(key, blob):
            self.split_saves += 1

    # -- saves -----------------------------------------------------------------------------
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
        """Write :meth:`encode_dirty`'s records (``on_save`` or the table; a state over
        ``max_record_bytes`` as parts and a header); a key is clean unless it changed
        after its snapshot. A clean state may be evicted from then on (at the next use
        of the cache: this touches no live state)."""
        for key, blob in encoded:
            self._write(key, blob)
            if self._encoded_at.pop(key, None) == self._changes.get(key, 0):
                self._dirty.discard(key)
                self._changes.pop(key, None)
                self._ops += 1
        self.saves += len(encoded)
        return len(encoded)

    def forget(self) -> None:
        """Drop live objects and unsaved changes (a rebalance): re-read from the table."""
        self._cache.clear()
        self._dirty.clear()
        self._encoded_at.clear()
        self._changes.clear()
        self._ops = 0
        self._scan_due = 1
