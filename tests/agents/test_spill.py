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
    assert sorted(x.name for x in tmp_path.iterdir()) == [bad.name]


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
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=2, spill_dir=tmp_path)
    for i in range(3):  # the third spills the oldest to a segment
        p.publish("x", b"k", str(i).encode())
    assert len(synced) >= 1 and list(tmp_path.glob("seg-*.jsonl"))
    before = len(synced)
    p.close(0)  # the rest goes to disk at exit, durably too
    assert len(synced) > before and not list(tmp_path.glob("*.tmp"))
