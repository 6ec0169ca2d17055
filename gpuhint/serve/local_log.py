"""A durable job-event log on local disk (SQLite): Kafka's part in ``gpuhint serve``.

One file holds what the Kafka pipeline keeps in three places: the job-event log (the
topic), each VC's saved state (the ``vc-state`` changelog) and the committed offset
(the consumer group's). The batch routine writes state records into the open
transaction; :meth:`LocalLog.commit` writes the offset and commits the transaction, so a
VC's saved state and the offset it covers become durable together, or neither does: a
restart, or a SIGKILL at any instant, resumes from the last commit, re-applies what it
had not saved and re-learns nothing (each VC's state carries its offset watermark, as in
the worker).

>>> log = LocalLog(":memory:")
>>> log.append([(b"default/a", b"{}"), (b"default/b", b"{}")])
(0, 2)
>>> [m.offset for m in log.read(0, 10)], log.committed()
([0, 1], 0)
>>> log.states["default/a"] = b"state"
>>> log.commit(2, meta={"feed": "{}"})
>>> log.committed(), log.meta("feed"), dict(log.states)
(2, '{}', {'default/a': b'state'})
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path

from gpuhint.cores.pipeline.handler import Message

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (offset INTEGER PRIMARY KEY, key BLOB, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ces_state (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (offset INTEGER, record BLOB NOT NULL);
"""


DEAD_LETTERS_KEPT = 10_000
"""Dead-letter records a data file keeps, the newest (each at most
``GPUHINT_DEAD_LETTER_MAX_BYTES``); older ones are deleted as new ones come."""


class LocalLogError(RuntimeError):
    """The data file is not a gpuhint log, or is of another version (one line)."""


class _StateTable(MutableMapping[str, bytes]):
    """A state table (``state``: the VC states :class:`TableStates` saves; ``ces_state``:
    the CES checkpoints) as a mapping; writes wait for :meth:`LocalLog.commit`."""

    def __init__(self, db: sqlite3.Connection, table: str = "state") -> None:
        self.db = db
        self.table = table

    def __getitem__(self, key: str) -> bytes:
        row = self.db.execute(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return bytes(row[0])

    def __setitem__(self, key: str, value: bytes) -> None:
        self.db.execute(
            f"INSERT OR REPLACE INTO {self.table} (key, value) VALUES (?, ?)", (key, value)
        )

    def __delitem__(self, key: str) -> None:
        if self.db.execute(f"DELETE FROM {self.table} WHERE key = ?", (key,)).rowcount == 0:
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter([r[0] for r in self.db.execute(f"SELECT key FROM {self.table} ORDER BY key")])

    def __len__(self) -> int:
        return int(self.db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])


class LocalLog:
    """The job-event log, the VC states and the committed offset in one SQLite file.

    ``path`` ``":memory:"`` keeps everything in memory (tests). Appends are durable when
    :meth:`append` returns; state writes wait for :meth:`commit`. One process at a time
    holds a file (an exclusive lock on ``<path>.lock``, released by :meth:`close` or the
    process's end): a second one is refused. Only the newest ``keep_dead_letters``
    dead-letter records are kept.
    """

    def __init__(
        self,
        path: str | Path,
        topic: str = "gpuhint.job-events",
        keep_dead_letters: int = DEAD_LETTERS_KEPT,
    ) -> None:
        self.path = str(path)
        self.topic = topic
        self.keep_dead_letters = keep_dead_letters
        self._lock_fd: int | None = None
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock(str(Path(self.path).resolve()))  # a symlink: its file
        try:
            self.db = sqlite3.connect(
                self.path, isolation_level="DEFERRED", check_same_thread=False
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._unlock()
            raise LocalLogError(f"{self.path}: not a gpuhint data file ({exc})") from None
        version = self.meta("schema_version")
        if version is None:
            self._set_meta("schema_version", SCHEMA_VERSION)
            self.db.commit()
        elif version != SCHEMA_VERSION:
            self.close()
            raise LocalLogError(
                f"{self.path}: data of schema {version}, this gpuhint reads {SCHEMA_VERSION}"
            )
        self.states = _StateTable(self.db)
        self.ces_states = _StateTable(self.db, "ces_state")

    # -- the log -------------------------------------------------------------------------
    def append(
        self, records: Iterable[tuple[bytes | None, bytes]], meta: dict[str, str] | None = None
    ) -> tuple[int, int]:
        """Append ``(key, value)`` records durably, with ``meta`` (e.g. the feed's
        watermark) in the same transaction; return the offsets ``[first, end)``.

        Commits the open transaction: call it between batches, not inside one."""
        first = self.end_offset()
        rows = [(first + i, k, v) for i, (k, v) in enumerate(records)]
        self.db.executemany("INSERT INTO events (offset, key, value) VALUES (?, ?, ?)", rows)
        for name, value in (meta or {}).items():
            self._set_meta(name, value)
        self.db.commit()
        return first, first + len(rows)

    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        row = self.db.execute("SELECT MAX(offset) FROM events").fetchone()
        return max(0 if row[0] is None else int(row[0]) + 1, self.committed())

    def read(self, start: int, limit: int) -> list[Message]:
        """Up to ``limit`` records from offset ``start`` on, as consumed messages."""
        rows = self.db.execute(
            "SELECT offset, key, value FROM events WHERE offset >= ? ORDER BY offset LIMIT ?",
            (start, limit),
        )
        return [
            Message(self.topic, 0, int(o), None if k is None else bytes(k), bytes(v))
            for o, k, v in rows
        ]

    def first_offset(self, at: int) -> int | None:
        """The first offset at or after ``at`` the log holds (None: none yet)."""
        row = self.db.execute("SELECT MIN(offset) FROM events WHERE offset >= ?", (at,)).fetchone()
        return None if row[0] is None else int(row[0])

    def dead_letter(self, offset: int, record: bytes) -> None:
        """Keep a rejected event's dead-letter record (committed with the next commit),
        deleting those past the newest ``keep_dead_letters``."""
        cur = self.db.execute(
            "INSERT INTO dead_letters (offset, record) VALUES (?, ?)", (offset, record)
        )
        if cur.lastrowid is not None:  # rowids grow by one per insert
            upto = cur.lastrowid - self.keep_dead_letters
            self.db.execute("DELETE FROM dead_letters WHERE rowid <= ?", (upto,))

    def dead_letters(self) -> list[bytes]:
        rows = self.db.execute("SELECT record FROM dead_letters ORDER BY rowid")
        return [bytes(r[0]) for r in rows]

    # -- offsets and metadata --------------------------------------------------------------
    def committed(self) -> int:
        """The offset the next run starts from: everything below it is durable."""
        value = self.meta("committed")
        return 0 if value is None else int(value)

    def commit(self, offset: int, meta: dict[str, str] | None = None) -> None:
        """Make the state written since the last commit durable with ``offset`` (and
        ``meta``, e.g. the feed's watermark) in one transaction."""
        self._set_meta("committed", str(offset))
        for name, value in (meta or {}).items():
            self._set_meta(name, value)
        self.db.commit()

    def meta(self, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, name: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))

    def compact(self, keep_from: int) -> int:
        """Drop committed records below ``keep_from`` (never past the commit); return how
        many. The log is a buffer, not an archive: a restart needs only what follows the
        commit."""
        upto = min(keep_from, self.committed())
        n = self.db.execute("DELETE FROM events WHERE offset < ?", (upto,)).rowcount
        self.db.commit()
        return int(n)

    def close(self) -> None:
        self.db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None


def _lock(path: str) -> int:
    """Hold ``path``'s lock file exclusively (its holder's pid written in it); a file
    another process holds is a :class:`LocalLogError`."""
    lock = f"{path}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LocalLogError(f"{lock}: cannot open ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise LocalLogError(
            f"{path}: in use by another process (pid {holder}): one gpuhint serve per "
            "cluster and state directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
