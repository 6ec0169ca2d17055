"""Spill segments that cannot be read back, and strangers in the spill dir (review 2026-12-07).

A truncated last line used to block sending forever (and crash ``close``); a file such as
``seg-old.jsonl`` stopped the agent at start-up.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from agents.publisher import BufferedPublisher, MemoryTransport, Record
from agents.spill import Spill

LINE = '{"t": "x", "k": "k", "v": "%s"}\n'


def _files(d: Path) -> list[str]:
    """The spill dir's files but its lock."""
    return sorted(x.name for x in d.iterdir() if x.name != ".lock")


def _seg(d: Path, n: int, text: str) -> Path:
    p = d / f"seg-{n:012d}.jsonl"
    p.write_text(text)
    return p


def test_a_truncated_segment_is_quarantined_and_the_rest_is_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _seg(tmp_path, 1, LINE % "a" + '{"t": "x", "k"\n')  # cut short by a crash
    _seg(tmp_path, 2, LINE % "b")
    t = MemoryTransport()
    p = BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path)
    p.publish("x", b"k", b"c")
    with caplog.at_level(logging.WARNING):
        assert p.flush(1.0) == 0
    assert [r.value for r in t.records] == [b"a", b"b", b"c"]
    assert p.corrupt == 1 and p.dropped == 1
    assert any("1 line(s) lost" in m for m in caplog.messages)
    bad = tmp_path / "seg-000000000001.jsonl.bad"
    assert bad.read_text().endswith('"k"\n')  # kept for inspection, never sent again
    assert _files(tmp_path) == [bad.name]


def test_a_segment_of_garbage_does_not_break_close(tmp_path: Path) -> None:
    seg = _seg(tmp_path, 1, "not json\n[1]\n" + json.dumps({"t": 1, "k": "k", "v": "v"}) + "\n")
    seg.write_bytes(seg.read_bytes() + b'{"t": "\xff"}\n')  # not UTF-8
    t = MemoryTransport()
    p = BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path)
    p.publish("x", b"k", b"{}")
    assert p.close(0.5) == 0
    assert [r.value for r in t.records] == [b"{}"] and p.corrupt == 4


def test_files_that_are_not_segments_are_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "seg-old.jsonl").write_text(LINE % "old")
    (tmp_path / "seg-000000000007.jsonl.bad").write_text("x\n")
    (tmp_path / "notes.txt").write_text("hello")
    with caplog.at_level(logging.WARNING):
        s = Spill(tmp_path, 100)
    assert s.count == 0 and any("seg-old.jsonl" in m for m in caplog.messages)
    s.write([Record("x", b"k", b"v")])  # numbered after the quarantined one
    assert (tmp_path / "seg-000000000008.jsonl").is_file()
    assert (tmp_path / "seg-old.jsonl").read_text() == LINE % "old"


def test_segments_are_sent_in_numeric_order(tmp_path: Path) -> None:
    _seg(tmp_path, 10, LINE % "10")
    _seg(tmp_path, 9, LINE % "9")
    t = MemoryTransport()
    BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path).flush(1.0)
    assert [r.value for r in t.records] == [b"9", b"10"]


def test_segments_are_fsynced_before_they_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=2, spill_dir=tmp_path)
    for i in range(3):  # the third spills the oldest to a segment
        p.publish("x", b"k", str(i).encode())
    assert len(synced) >= 1 and list(tmp_path.glob("seg-*.jsonl"))
    before = len(synced)
    p.close(0)  # the rest goes to disk at exit, durably too
    assert len(synced) > before and not list(tmp_path.glob("*.tmp"))


def _spilled(tmp_path: Path, n: int) -> tuple[BufferedPublisher, MemoryTransport]:
    """A publisher whose broker is down, after ``n`` records (buffer of 2: spills)."""
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=2, spill_dir=tmp_path)
    for i in range(n):
        p.publish("x", b"k", str(i).encode())
    return p, t


def test_a_segment_deleted_under_the_agent_does_not_stop_sending(tmp_path: Path) -> None:
    p, t = _spilled(tmp_path, 3)  # "0" on disk, "1", "2" in memory
    for seg in tmp_path.glob("seg-*.jsonl"):
        seg.unlink()  # an operator cleans the spill dir while Kafka is away
    t.down = False
    p.publish("x", b"k", b"3")
    assert p.flush(1.0) == 0  # used to fail on the missing file forever: nothing sent again
    assert [r.value for r in t.records] == [b"1", b"2", b"3"]
    assert p.dropped == 1  # the deleted record is counted as lost


def test_a_failed_spill_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    p, _ = _spilled(tmp_path, 9)  # every spill fails: the disk is full
    assert p.dropped > 0
    assert _files(tmp_path) == []  # no .tmp left to fill the disk


def test_a_write_cut_short_by_a_crash_is_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / "seg-000000000003.tmp").write_text(LINE % "half")
    s = Spill(tmp_path, 100)
    assert s.count == 0 and not (tmp_path / "seg-000000000003.tmp").exists()


def test_a_failed_rewrite_after_a_partial_ack_keeps_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class One(MemoryTransport):
        def send(self, records, timeout_s):  # type: ignore[no-untyped-def]
            return super().send(records[:1], timeout_s)

    t = One()
    t.down = True
    p = BufferedPublisher(t, buffer_max=4, spill_dir=tmp_path)
    for i in range(5):  # "0", "1" on disk; "2".."4" in memory
        p.publish("x", b"k", str(i).encode())
    t.down = False
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "full")))
    p.pump(force=True)  # "0" acked, then the rest of its segment cannot be rewritten
    monkeypatch.setattr(os, "fsync", real)
    assert p.pending == 5  # the segment is still there (at least once: "0" goes again)
    assert p.flush(1.0) == 0
    got = [r.value.decode() for r in t.records]
    assert got == ["0", "0", "1", "2", "3", "4"]  # in order, nothing left behind
    assert not _files(tmp_path)


def test_a_full_disk_while_quarantining_loses_no_readable_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seg(tmp_path, 1, LINE % "a" + '{"t": "x", "k"\n')
    t = MemoryTransport()
    p = BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path)
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "full")))
    p.pump(force=True)  # the readable records cannot be rewritten: the segment stays whole
    monkeypatch.setattr(os, "fsync", real)
    assert p.flush(1.0) == 0
    assert [r.value for r in t.records] == [b"a"] and p.corrupt == 1
    assert _files(tmp_path) == ["seg-000000000001.jsonl.bad"]


def test_two_agents_cannot_share_a_spill_dir(tmp_path: Path) -> None:
    """A second agent on the same dir (a manual ``--once`` beside the service, with its env
    file) numbered its segments like the first, overwriting them, and sent and deleted
    the first's segments under it."""
    from agents.spill import SpillDirBusy

    first = BufferedPublisher(MemoryTransport(), buffer_max=10, spill_dir=tmp_path)
    with pytest.raises(SpillDirBusy, match=f"in use by another agent \\(pid {os.getpid()}\\)"):
        BufferedPublisher(MemoryTransport(), buffer_max=10, spill_dir=tmp_path)
    first.close(0)  # a stopped agent frees it
    BufferedPublisher(MemoryTransport(), buffer_max=10, spill_dir=tmp_path).close(0)
