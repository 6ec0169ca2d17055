"""The local durable log of ``gpuhint serve`` on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.serve.local_log import LocalLog, LocalLogError


def test_appends_survive_a_reopen_and_uncommitted_state_does_not(tmp_path: Path) -> None:
    path = tmp_path / "serve.sqlite"
    log = LocalLog(path)
    assert log.append([(b"k", b"v1"), (None, b"v2")], meta={"feed": "w1"}) == (0, 2)
    log.states["vc"] = b"saved"
    log.commit(1)
    log.states["vc"] = b"not committed"  # a kill before the next commit
    log.db.rollback()
    log.close()
    again = LocalLog(path)
    assert [(m.offset, m.key, m.value) for m in again.read(0, 10)] == [
        (0, b"k", b"v1"),
        (1, None, b"v2"),
    ]
    assert again.committed() == 1 and again.meta("feed") == "w1"
    assert dict(again.states) == {"vc": b"saved"}


def test_compaction_keeps_everything_after_the_commit(tmp_path: Path) -> None:
    log = LocalLog(tmp_path / "s.sqlite")
    log.append([(b"k", b"%d" % i) for i in range(5)])
    log.commit(3)
    assert log.compact(keep_from=10) == 3  # never past the commit
    assert [m.offset for m in log.read(0, 10)] == [3, 4]
    log.compact(keep_from=5)
    log.commit(5)
    log.compact(keep_from=5)
    assert log.read(0, 10) == [] and log.end_offset() == 5  # offsets never restart


def test_a_file_that_is_not_a_log_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not SQLite\n" * 100)
    with pytest.raises(LocalLogError, match=r"notes\.txt: not a gpuhint data file"):
        LocalLog(bad)
    other = tmp_path / "other.sqlite"
    first = LocalLog(other)
    first.db.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    first.db.commit()
    first.close()
    with pytest.raises(LocalLogError, match="data of schema 99, this gpuhint reads 1"):
        LocalLog(other)


def test_state_table_is_a_mapping(tmp_path: Path) -> None:
    log = LocalLog(":memory:")
    log.states["a"] = b"1"
    log.states["b"] = b"2"
    del log.states["a"]
    assert list(log.states) == ["b"] and len(log.states) == 1
    with pytest.raises(KeyError):
        del log.states["a"]


def test_a_second_process_on_the_same_file_is_refused(tmp_path: Path) -> None:
    """Two ``serve`` processes on one cluster's file (a ``--dry-run --once`` check next
    to the running service) would each append the same transitions and overwrite each
    other's VC states: the second is refused in one line, until the first closes."""
    import subprocess
    import sys

    path = tmp_path / "serve.sqlite"
    first = LocalLog(path)
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from gpuhint.serve.local_log import LocalLog; "
         "LocalLog(sys.argv[1])", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert other.returncode != 0 and "LocalLogError" in other.stderr, other.stderr
    assert f"in use by another process (pid {__import__('os').getpid()})" in other.stderr
    with pytest.raises(LocalLogError, match="in use by another process"):
        LocalLog(path)
    first.close()
    LocalLog(path).close()  # free again


def test_dead_letters_keep_only_the_newest(tmp_path: Path) -> None:
    """Every dead letter stayed in the file for ever (the event log is compacted, they
    were not): a bad event or a CES error on every poll grew the file without bound."""
    import json

    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.serve.runner import OneProcess

    one = OneProcess(LocalLog(tmp_path / "s.sqlite", keep_dead_letters=50), InMemoryStore())
    for _ in range(3):
        one.ingest_raw([(b"default/a", b"not json")] * 40)
        one.drain()
    records = [json.loads(r) for r in one.log.dead_letters()]
    assert [r["offset"] for r in records] == list(range(70, 120))
    assert all(r["reason"].startswith("not JSON") for r in records)


def test_a_second_open_through_a_symlink_is_refused_too(tmp_path: Path) -> None:
    """The lock file was named after the path given: a second ``serve`` reaching the
    same data file through a symlink locked another file and wrote the same log."""
    path = tmp_path / "serve.sqlite"
    first = LocalLog(path)
    link = tmp_path / "link.sqlite"
    link.symlink_to(path)
    with pytest.raises(LocalLogError, match="in use by another process"):
        LocalLog(link)
    first.close()
    LocalLog(link).close()  # free again once the first has closed
