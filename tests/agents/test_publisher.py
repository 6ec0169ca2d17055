"""BufferedPublisher: bounded, drops and counts the oldest, retries with backoff, spills to disk."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agents.publisher import BufferedPublisher, MemoryTransport, Record, StdoutTransport


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def values(t: MemoryTransport) -> list[bytes]:
    return [r.value for r in t.records]


def test_bound_hit_drops_the_oldest_and_counts_them() -> None:
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=10, clock=Clock())
    for i in range(25):
        p.publish("x", b"k", str(i).encode())
        p.pump()
    assert p.pending == 10 and p.dropped == 15
    t.down = False
    assert p.pump(force=True) == 10
    assert values(t) == [str(i).encode() for i in range(15, 25)]
    assert p.pending == 0 and p.sent == 10


def test_retries_back_off_then_deliver_in_order() -> None:
    t = MemoryTransport()
    clock = Clock()
    p = BufferedPublisher(t, buffer_max=100, retry_initial_s=1, retry_max_s=4, clock=clock)
    t.down = True
    p.publish("x", b"k", b"a")
    p.pump()
    assert t.attempts == 1
    p.pump()  # still backing off: no new attempt
    assert t.attempts == 1
    delays = []
    for _ in range(4):
        before = t.attempts
        while t.attempts == before:
            clock.t += 0.5
            p.pump()
        delays.append(clock.t)
    gaps = [b - a for a, b in zip([0.0, *delays], delays, strict=False)]
    assert gaps == [1.0, 2.0, 4.0, 4.0]  # doubling, capped at retry_max_s
    p.publish("x", b"k", b"b")
    t.down = False
    clock.t += 4
    assert p.pump() == 2 and values(t) == [b"a", b"b"]
    assert p.failures == 5


def test_partial_acknowledgement_keeps_the_rest() -> None:
    class Half(MemoryTransport):
        def send(self, records, timeout_s):  # type: ignore[no-untyped-def]
            n = max(1, len(records) // 2)
            return super().send(records[:n], timeout_s)

    t = Half()
    p = BufferedPublisher(t, buffer_max=100, batch_max=8, clock=Clock())
    for i in range(8):
        p.publish("x", b"k", bytes([i]))
    p.pump()
    assert values(t) == [bytes([i]) for i in range(8)]


def test_disk_spill_keeps_the_oldest_in_order_and_survives_a_restart(tmp_path: Path) -> None:
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path, clock=Clock())
    for i in range(40):
        p.publish("x", b"k", str(i).encode())
    assert p.dropped == 0 and p.pending == 40
    assert list(tmp_path.glob("seg-*.jsonl"))
    lost = p.close(timeout_s=0)  # broker still down: the rest goes to disk too
    assert lost == 0
    # a new agent on the same spill dir sends everything, oldest first
    t2 = MemoryTransport()
    p2 = BufferedPublisher(t2, buffer_max=10, spill_dir=tmp_path, clock=Clock())
    assert p2.pending == 40
    p2.publish("x", b"k", b"new")
    assert p2.flush(1.0) == 0
    assert values(t2) == [str(i).encode() for i in range(40)] + [b"new"]
    assert not list(tmp_path.glob("seg-*.jsonl"))


def test_disk_spill_is_bounded_too(tmp_path: Path) -> None:
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=10, spill_dir=tmp_path, spill_max_records=20, clock=Clock())
    for i in range(100):
        p.publish("x", b"k", str(i).encode())
    assert p.pending <= 30 and p.dropped + p.pending == 100
    t.down = False
    p.flush(1.0)
    got = [int(v) for v in values(t)]
    assert got == sorted(got) and got[-1] == 99 and len(got) == 100 - p.dropped


def test_close_without_spill_counts_what_is_left() -> None:
    t = MemoryTransport()
    t.down = True
    p = BufferedPublisher(t, buffer_max=10, clock=Clock())
    for i in range(3):
        p.publish("x", b"k", bytes([i]))
    assert p.close(timeout_s=0) == 3 and p.dropped == 3


def test_stdout_transport_writes_one_json_line_per_record() -> None:
    out = io.StringIO()
    n = StdoutTransport(out).send([Record("t1", b"c/n", b'{"a":1}')], 1.0)
    assert n == 1
    assert json.loads(out.getvalue()) == {"topic": "t1", "key": "c/n", "message": {"a": 1}}


def test_a_nan_flush_timeout_is_refused_not_a_silent_loss() -> None:
    t = MemoryTransport()
    p = BufferedPublisher(t, buffer_max=10)
    p.publish("x", b"k", b"{}")
    with pytest.raises(ValueError, match="timeout_s"):
        p.close(float("nan"))
    assert p.pending == 1 and p.close(1.0) == 0 and len(t.records) == 1


def test_the_exit_flush_keeps_to_its_timeout_with_a_slow_broker(tmp_path: Path) -> None:
    """flush(10) sent every pending batch however long each took (a slow broker: minutes),
    so systemd's / Kubernetes' SIGKILL (30 s) came first and the buffer was lost."""
    clock = Clock()
    timeouts: list[float] = []

    class Slow(MemoryTransport):
        def send(self, records, timeout_s):  # type: ignore[no-untyped-def]
            timeouts.append(timeout_s)
            clock.t += 4.0  # each batch takes 4 s to be acknowledged
            return super().send(records, timeout_s)

    t = Slow()
    p = BufferedPublisher(t, buffer_max=100, batch_max=2, spill_dir=tmp_path, clock=clock)
    for i in range(20):
        p.publish("x", b"k", str(i).encode())
    assert p.close(timeout_s=10.0) == 0
    assert clock.t <= 12.0 and timeouts == [10.0, 6.0, 2.0]  # no send past the deadline
    assert len(t.records) == 6 and p.pending == 14  # the rest is kept on disk
    assert list(tmp_path.glob("seg-*.jsonl"))


def test_a_tick_sends_for_at_most_its_budget() -> None:
    clock = Clock()

    class Slow(MemoryTransport):
        def send(self, records, timeout_s):  # type: ignore[no-untyped-def]
            clock.t += 4.0
            return super().send(records, timeout_s)

    t = Slow()
    p = BufferedPublisher(t, buffer_max=100, batch_max=2, clock=clock)
    for i in range(20):
        p.publish("x", b"k", str(i).encode())
    assert p.pump(budget_s=10.0) == 6 and p.pending == 14
    assert p.pump() == 14  # no budget: everything
