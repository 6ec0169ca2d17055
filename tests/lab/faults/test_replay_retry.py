"""Replay through a broker outage (in-memory twin): retries, gives up on time, resumes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from agents.publisher import MemoryTransport, Record
from gpuhint.lab.replay import BrokerGone, ResumeState, fingerprint, replay_acked
from gpuhint.wire.contract import JobEvent, decode_job_event


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class FlakyTransport(MemoryTransport):
    """Down while ``clock`` is inside ``[down_from, down_until)``; acks half a batch once."""

    def __init__(self, clock: Clock, down_from: float, down_until: float) -> None:
        super().__init__()
        self.clock, self.down_from, self.down_until = clock, down_from, down_until
        self.partial_done = False

    def send(self, records: Sequence[Record], timeout_s: float) -> int:
        self.clock.now += 0.01
        self.down = self.down_from <= self.clock.now < self.down_until
        if not self.down and not self.partial_done and len(records) > 1:
            self.partial_done = True  # a batch cut short: only its front was acknowledged
            return super().send(records[: len(records) // 2], timeout_s)
        return super().send(records, timeout_s)


def _events(n: int) -> list[JobEvent]:
    return [
        JobEvent(phase="submitted", job_id=str(i), vc=f"v{i % 3}", time=i, submit_time=i)
        for i in range(n)
    ]


def _ids(t: MemoryTransport) -> list[str]:
    return [decode_job_event(r.value).job_id for r in t.records]


def test_an_outage_shorter_than_the_budget_loses_and_duplicates_nothing() -> None:
    clock = Clock()
    t = FlakyTransport(clock, down_from=0.05, down_until=35.0)
    events = _events(2000)
    seen: list[int] = []
    prog = replay_acked(
        events, "t", t, batch_max=100, retry_s=60, sleep=clock.sleep, clock=clock,
        on_progress=lambda p: seen.append(p.acked),
    )  # fmt: skip
    assert prog.acked == 2000 and prog.outages == 1 and prog.retries > 3
    assert _ids(t) == [str(i) for i in range(2000)]  # in order, each once
    assert seen == sorted(seen)


def test_a_long_outage_stops_with_how_far_it_got_and_resume_continues(tmp_path: Path) -> None:
    clock = Clock()
    t = FlakyTransport(clock, down_from=0.2, down_until=1e9)
    events = _events(3000)
    state = ResumeState(tmp_path / "s.json", fingerprint("trace", 3000))
    with pytest.raises(BrokerGone, match="of 3,000 events acknowledged") as err:
        replay_acked(
            events, "t", t, batch_max=100, retry_s=150, sleep=clock.sleep, clock=clock,
            on_progress=lambda p: state.save(p.acked, p.total),
        )  # fmt: skip
    assert clock.now >= 150
    done = state.load()
    assert 0 < done < 3000 and f"{done:,} of" in str(err.value)
    assert _ids(t) == [str(i) for i in range(done)]
    t.down_until = 0.0  # the broker is back
    replay_acked(events, "t", t, start=done, sleep=clock.sleep, clock=clock)
    assert _ids(t) == [str(i) for i in range(3000)]


def test_resume_refuses_the_state_of_another_replay(tmp_path: Path) -> None:
    ResumeState(tmp_path / "s.json", "aaaa").save(10, 20)
    with pytest.raises(ValueError, match="another replay"):
        ResumeState(tmp_path / "s.json", "bbbb").load()
    assert ResumeState(tmp_path / "none.json", "aaaa").load() == 0


def test_paced_replay_sends_what_is_due() -> None:
    clock = Clock()
    t = MemoryTransport()
    replay_acked(_events(10), "t", t, speed=2.0, sleep=clock.sleep, clock=clock)
    assert _ids(t) == [str(i) for i in range(10)]
    assert 4.4 <= clock.now <= 5.0  # 9 s of trace time at 2x


def test_the_agent_publisher_logs_an_outage_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agents.publisher import BufferedPublisher

    clock = Clock()
    t = MemoryTransport()
    t.down = True
    pub = BufferedPublisher(t, buffer_max=100, retry_initial_s=1, retry_max_s=5, clock=clock)
    pub.publish("t", b"k", b"v")
    with caplog.at_level("WARNING", logger="agents.publisher"):
        for _ in range(600):  # ten minutes of retries, one a second
            pub.pump(force=True)
            clock.now += 1.0
    lines = [r for r in caplog.records if r.levelname == "WARNING"]
    assert 9 <= len(lines) <= 12  # the first, then one a minute, not 600
    assert "still down after" in lines[-1].getMessage()


def test_chatty_library_logs_are_rate_limited() -> None:
    import logging

    from gpuhint.wire.logs import RateLimitFilter

    clock = Clock()
    f = RateLimitFilter(every_s=30.0, clock=clock)
    passed = []
    for i in range(1200):  # 110 lines/s for ~11 s, then 2 minutes at 10/s
        clock.now += 0.1
        rec = logging.LogRecord(
            "aiokafka.conn", logging.ERROR, "", 0, "Unable connect %s", (i,), None
        )
        if f.filter(rec):
            passed.append(rec.getMessage())
    assert 4 <= len(passed) <= 5  # one every 30 s instead of 1200
    assert "similar line(s)" in passed[-1]
