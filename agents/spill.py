"""Disk segments for :class:`agents.publisher.BufferedPublisher`: the spilled records,
oldest first, bounded in records, durable once written.

A segment is ``seg-<n>.jsonl``, one ``{"t": topic, "k": key, "v": value}`` line per
record, written to a temporary file, flushed and fsync'd, then renamed into place. A
segment that cannot be read back whole (a line cut short by a crash or a full disk, a
line that is not a record) is *quarantined*: the file is renamed ``<name>.bad`` and kept
for inspection, its readable records are still sent, and the lines lost are logged and
reported to ``on_lost``. Other files in the directory are left alone.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> s = Spill(d, 100)
>>> s.write([Record("t", b"k", b"{}")]), s.count
(0, 1)
>>> _ = (d / "seg-000000000002.jsonl").write_text('{"t": "t", "k": "k", "v": "1"}\\n{"t"')
>>> s2 = Spill(d, 100)
>>> [r.value for r in s2.head()], s2.consume_head(1, s2.head())
([b'{}'], None)
>>> [r.value for r in s2.head()], s2.lost, sorted(p.name for p in d.iterdir())
([b'1'], 1, ['seg-000000000002.jsonl', 'seg-000000000002.jsonl.bad'])
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One record to publish (:mod:`agents.publisher` re-exports it)."""

    topic: str
    key: bytes
    value: bytes


_SEGMENT = re.compile(r"^seg-(\d+)\.jsonl(\.bad)?$")


class Spill:
    """Disk segments ``seg-<n>.jsonl`` of spilled records, oldest first, bounded in records.

    ``on_lost(n)`` is called with the number of lines lost in a quarantined segment.
    """

    def __init__(
        self, directory: Path, max_records: int, on_lost: Callable[[int], None] | None = None
    ) -> None:
        self.dir = directory
        self.max_records = max_records
        self.on_lost = on_lost
        self.lost = 0
        """Lines lost in quarantined segments so far."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segments: deque[tuple[Path, int]] = deque()
        found: list[tuple[int, Path]] = []
        last = 0
        for p in self.dir.glob("seg-*"):
            m = _SEGMENT.match(p.name)
            if m is None:
                if p.suffix != ".tmp":  # a .tmp is a write cut short: never renamed, not sent
                    log.warning("spill dir %s: ignoring %s (not a segment)", self.dir, p.name)
                continue
            last = max(last, int(m.group(1)))
            if m.group(2) is None:
                found.append((int(m.group(1)), p))
        for _, p in sorted(found):
            try:
                with p.open("rb") as f:
                    n = sum(1 for _ in f)
            except OSError as exc:
                log.warning("spill dir %s: cannot read %s: %s; skipped", self.dir, p.name, exc)
                continue
            if n:
                self.segments.append((p, n))
            else:
                p.unlink(missing_ok=True)
        self._seq = last + 1

    @property
    def count(self) -> int:
        return sum(n for _, n in self.segments)

    def write(self, records: Sequence[Record]) -> int:
        """Append a segment; return how many records were dropped to stay in the bound."""
        path = self.dir / f"seg-{self._seq:012d}.jsonl"
        self._seq += 1
        self._write_durably(path, records)
        self.segments.append((path, len(records)))
        dropped = 0
        while self.count > self.max_records and len(self.segments) > 1:
            old, n = self.segments.popleft()
            old.unlink(missing_ok=True)
            dropped += n
        return dropped

    def head(self) -> list[Record]:
        """The records of the oldest segment that has any ([] when none is left);
        unreadable segments on the way are quarantined."""
        while self.segments:
            path, n = self.segments[0]
            records, bad = _read_segment(path)
            if bad:
                self._quarantine(path, bad, records)
            if records:
                if len(records) != n:
                    self.segments[0] = (path, len(records))
                return records
            self.segments.popleft()
        return []

    def consume_head(self, n: int, records: list[Record]) -> None:
        """``n`` records of the head segment (read as ``records``) were sent."""
        path, _ = self.segments.popleft()
        rest = records[n:]
        if not rest:
            path.unlink(missing_ok=True)
            return
        self._write_durably(path, rest)
        self.segments.appendleft((path, len(rest)))

    def _quarantine(self, path: Path, bad: int, good: list[Record]) -> None:
        """Keep a segment with ``bad`` unreadable lines as ``<name>.bad``; the ``good``
        records stay in ``path`` to be sent."""
        kept = path.with_name(path.name + ".bad")
        path.replace(kept)
        if good:
            self._write_durably(path, good)
        self.lost += bad
        log.warning(
            "spill segment %s is corrupt: %d line(s) lost, %d record(s) still sent; kept as %s",
            path.name,
            bad,
            len(good),
            kept.name,
        )
        if self.on_lost is not None:
            self.on_lost(bad)

    def _write_durably(self, path: Path, records: Iterable[Record]) -> None:
        """Write ``records`` to ``path`` atomically, fsync'd before and after the rename."""
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(
                    json.dumps({"t": r.topic, "k": r.key.decode(), "v": r.value.decode()}) + "\n"
                )
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        with contextlib.suppress(OSError):  # the rename itself (not on every platform)
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _read_segment(path: Path) -> tuple[list[Record], int]:
    """The records of a segment file and how many of its lines are not records."""
    out: list[Record] = []
    bad = 0
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            t, k, v = d["t"], d["k"], d["v"]
        except (ValueError, KeyError, TypeError):  # JSONDecodeError, bad UTF-8, not a dict
            bad += 1
            continue
        if isinstance(t, str) and isinstance(k, str) and isinstance(v, str):
            out.append(Record(t, k.encode(), v.encode()))
        else:
            bad += 1
    return out, bad
