"""Disk segments for :class:`agents.publisher.BufferedPublisher`: the spilled records,
oldest first, bounded in records, durable once written.

A segment is ``seg-<n>.jsonl``, one ``{"t": topic, "k": key, "v": value}`` line per
record, written to a temporary file, flushed and fsync'd, then renamed into place. A
segment that cannot be read back whole (a line cut short by a crash or a full disk, a
line that is not a record) is *quarantined*: the file is renamed ``<name>.bad`` and kept
for inspection, its readable records are still sent, and the lines lost are logged and
reported to ``on_lost``. A segment that cannot be read at all (deleted under the agent,
unreadable) is skipped, never blocking the records behind it; a deleted one's records are
reported lost. A ``.tmp`` file is a write cut short (its records were never counted): it
is removed, at start-up or when the write fails (a full disk). Other files in the
directory are left alone. One agent at a time uses a directory (a lock on ``.lock``,
freed by :meth:`Spill.close` or the process's end): a second one gets
:class:`SpillDirBusy`.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> s = Spill(d, 100)
>>> s.write([Record("t", b"k", b"{}")]), s.count
(0, 1)
>>> s.close()
>>> _ = (d / "seg-000000000002.jsonl").write_text('{"t": "t", "k": "k", "v": "1"}\\n{"t"')
>>> s2 = Spill(d, 100)
>>> [r.value for r in s2.head()], s2.consume_head(1, s2.head())
([b'{}'], None)
>>> [r.value for r in s2.head()], s2.lost, sorted(p.name for p in d.glob('seg-*'))
([b'1'], 1, ['seg-000000000002.jsonl', 'seg-000000000002.jsonl.bad'])
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One record to publish (:mod:`agents.publisher` re-exports it)."""

    topic: str
    key: bytes
    value: bytes


class SpillDirBusy(OSError):
    """Another agent (process) uses this spill directory."""


_SEGMENT = re.compile(r"^seg-(\d+)\.jsonl(\.bad)?$")


class Spill:
    """Disk segments ``seg-<n>.jsonl`` of spilled records, oldest first, bounded in records.

    ``on_lost(n)`` is called with the number of lines lost in a quarantined segment, or
    records in a segment deleted under the agent.
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
        self._lock = _lock(self.dir)
        self.segments: deque[tuple[Path, int]] = deque()
        found: list[tuple[int, Path]] = []
        last = 0
        for p in self.dir.glob("seg-*"):
            m = _SEGMENT.match(p.name)
            if m is None:
                if p.suffix == ".tmp":  # a write cut short by a crash: never counted, not sent
                    log.info("spill dir %s: removing %s (a write cut short)", self.dir, p.name)
                    with contextlib.suppress(OSError):
                        p.unlink()
                else:
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

    def close(self) -> None:
        """Free the directory for another agent (what is on disk stays)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

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
        corrupt segments on the way are quarantined, unreadable ones skipped."""
        while self.segments:
            path, n = self.segments[0]
            try:
                records, bad = _read_segment(path)
            except OSError as exc:  # deleted or unreadable: it must not block the rest
                self.segments.popleft()
                self._unreadable(path, n, exc)
                continue
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
        path, _ = self.segments[0]
        rest = records[n:]
        if not rest:
            self.segments.popleft()
            path.unlink(missing_ok=True)
            return
        self._write_durably(path, rest)  # if this fails the segment stays, sent again whole
        self.segments[0] = (path, len(rest))

    def _unreadable(self, path: Path, n: int, exc: OSError) -> None:
        """Skip a head segment that cannot be read: lost when deleted, else kept on disk
        (sent after a restart)."""
        if isinstance(exc, FileNotFoundError):
            self.lost += n
            log.error("spill segment %s vanished: %d record(s) lost", path.name, n)
            if self.on_lost is not None:
                self.on_lost(n)
        else:
            log.error(
                "cannot read spill segment %s: %s; skipped, its %d record(s) stay on disk "
                "for the next start",
                path.name,
                exc,
                n,
            )

    def _quarantine(self, path: Path, bad: int, good: list[Record]) -> None:
        """Keep a segment with ``bad`` unreadable lines as ``<name>.bad``; the ``good``
        records stay in ``path`` to be sent."""
        kept = path.with_name(path.name + ".bad")
        path.replace(kept)
        if good:
            try:
                self._write_durably(path, good)
            except OSError:  # a full disk: keep the segment as it was, try again later
                kept.replace(path)
                raise
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
        try:
            with tmp.open("w", encoding="utf-8") as f:
                for r in records:
                    line = {"t": r.topic, "k": r.key.decode(), "v": r.value.decode()}
                    f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(path)
        except BaseException:  # a full disk, a bad record: leave no partial file behind
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        with contextlib.suppress(OSError):  # the rename itself (not on every platform)
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _lock(directory: Path) -> TextIO | None:
    """Hold ``directory/.lock`` (with our pid in it); raise :class:`SpillDirBusy` when
    another process holds it. None where the file system has no locks."""
    f = (directory / ".lock").open("a+", encoding="utf-8")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise SpillDirBusy(
            f"spill dir {directory} is in use by another agent (pid {holder}); "
            "give each agent its own spill dir"
        ) from None
    except OSError as exc:  # no locks on this file system: go on without
        log.warning("spill dir %s: cannot lock it (%s)", directory, exc)
        f.close()
        return None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


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
