"""Job rosters at their edges: resends, jobs never seen waiting, sacct without a
watermark, a false retirement undone, the epoch bound, redelivery to CES, part sizes."""

from __future__ import annotations

import time

import pytest

from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.cores.job_roster import roster_parts
from gpuhint.cores.pipeline.cluster_load import make_processor
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import (
    InvalidMessage,
    JobEvent,
    JobRoster,
    decode_message,
    encode_message,
)
from gpuhint.wire.topics import Topics, job_key
from models.history import HistoryEstimator
from tests.cores.test_qssf_roster import _ev, _roster


def _engine() -> HintEngine:
    return HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)


# 1 ---------------------------------------------------------------------------------------
def test_a_resent_roster_is_not_a_second_roster() -> None:
    """The agent's publisher is at-least-once (a batch whose ack was lost is sent again,
    under a new offset). One roster, delivered twice, must count as one miss."""
    engine = _engine()
    engine.on_job_event(_ev("submitted", "x", 0), offset=0)
    assert engine.on_roster(_roster(60), offset=1) == []  # x missed once
    resent = engine.on_roster(_roster(60), offset=2)  # the same roster (epoch 60) again
    assert resent == [], "one roster, received twice, retired x"


# 2 ---------------------------------------------------------------------------------------
def test_retiring_a_job_never_seen_waiting_frees_its_gpus() -> None:
    """A job whose ``submitted`` was lost (full agent buffer, topic retention: the cases
    rosters are for) is running with no start-book entry: its retirement says 0 GPUs."""
    engine = _engine()
    engine.on_job_event(_ev("started", "y", 100, submit_time=50.0, start_time=100.0, num_gpus=4))
    st = engine.states["default/a"]
    assert st.running_gpus == 4
    engine.on_roster(_roster(200))
    retired = engine.on_roster(_roster(500))
    assert [e.job_id for e in retired] == ["y"]
    assert retired[0].num_gpus == 4, "retired with num_gpus=0"
    assert st.running_gpus == 0, "its 4 GPUs stay counted as busy for good"


def test_a_job_started_after_the_rosters_epoch_never_misses_it() -> None:
    """docs/operations.md and qssf_roster: jobs submitted (or started) after a roster's
    epoch never miss it; `_since` falls back to -inf for a job never seen waiting."""
    engine = _engine()
    engine.on_job_event(_ev("started", "y", 1100, submit_time=1050.0, start_time=1100.0))
    engine.on_roster(_roster(1000))  # a roster of before the job existed
    assert engine.states["default/a"].roster_missed.get("y") is None


# 3 ---------------------------------------------------------------------------------------
HEADER = "JobID|State|Submit|Start|End|User|Account|Partition|AllocTRES|ReqTRES"
OTHER = "7|PENDING|1000|Unknown|Unknown|u|a|gpu||gres/gpu=1"
HELD_RELEASED = "5|PENDING|900|Unknown|Unknown|u|a|gpu||gres/gpu=2"


def _sacct_restart(monkeypatch):
    """A worker that holds job 5 (announced by the agent before its restart), and the
    restarted `--slurm sacct` agent without a watermark, 5 now held (`scontrol hold`):
    the window lists a pending job only while it is eligible (SlurmFeed._unlisted's
    docstring) and `_unlisted` only looks up jobs the fresh tracker knows."""
    import gpuhint.slurm.feed as slurm_feed_mod
    from gpuhint.slurm.feed import slurm_feed

    window = {"rows": [OTHER]}

    def fake_read(source, timeout_s=60.0):
        assert isinstance(source, tuple) and source[0] == "sacct"
        if "--jobs" in source:
            return HEADER + "\n"
        return "\n".join([HEADER, *window["rows"]]) + "\n"

    monkeypatch.setattr(slurm_feed_mod, "read_source", fake_read)
    handler = MessageHandler(HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0))
    offset = [0]

    def deliver(value: bytes, key: bytes) -> None:
        out = handler.job_event(Message(handler.topics.job_events, 0, offset[0], key, value))
        assert out.dead_letter is None, out.reason
        offset[0] += 1

    ev5 = JobEvent(phase="submitted", job_id="5", cluster="c", vc="a", num_gpus=2,
                   time=900, submit_time=900)  # fmt: skip
    deliver(encode_message(ev5), job_key("c", "a"))
    now = [2000.0]
    transport = MemoryTransport()
    agent = NodeAgent(nvml=None, publisher=BufferedPublisher(transport), cluster="c",
                      node="ctl", feeds=[slurm_feed("sacct", cluster="c")],
                      clock=lambda: now[0], roster_every_s=300)  # fmt: skip
    agent.start()

    def ticks(n: int) -> None:
        for _ in range(n):
            agent.tick()
            now[0] += 300
        for r in transport.records:
            if r.topic == handler.topics.job_events:
                deliver(r.value, r.key)
        transport.records.clear()

    return handler, window, ticks


def test_a_held_job_outside_the_sacct_window_is_not_retired(monkeypatch) -> None:
    handler, _, ticks = _sacct_restart(monkeypatch)
    ticks(3)
    assert "5" in handler.engine.states["c/a"].pending, "a live (held) job was retired"


def test_a_retired_job_announced_again_is_held_again(monkeypatch) -> None:
    """Whatever made a roster leave a live job out, the agent's later announcement of
    it must bring it back; today it is a 'duplicate' of a finished job, ignored."""
    handler, window, ticks = _sacct_restart(monkeypatch)
    ticks(3)
    window["rows"] = [OTHER, HELD_RELEASED]  # released: the window lists it again
    ticks(1)
    assert "5" in handler.engine.states["c/a"].pending


# 4 ---------------------------------------------------------------------------------------
def test_a_roster_epoch_is_bounded_like_an_event_time() -> None:
    """JobEvent.time is refused beyond now + max_future_s; a roster's epoch is not, and
    it becomes the time of the `finished` events the roster retires."""
    far = time.time() + 30 * 86400
    with pytest.raises(InvalidMessage):
        decode_message(encode_message(JobEvent(phase="submitted", job_id="1", vc="a",
                                               time=far, submit_time=0)))  # fmt: skip
    with pytest.raises(InvalidMessage):
        decode_message(encode_message(JobRoster(vc="a", epoch=far)))


# 5 ---------------------------------------------------------------------------------------
def test_a_redelivered_roster_forwards_its_retirements_again() -> None:
    """A redelivered job event is forwarded to CES again (CES is idempotent); a roster
    redelivered after its VC state was saved forwards nothing: if the crash came after
    the changelog record but before the forward was acknowledged, CES never frees the
    retired job's nodes."""
    store = InMemoryStore()
    handler = MessageHandler(
        HintEngine(HistoryEstimator, store, clock=lambda: 0.0),
        Topics(),
        make_processor(store, policy="jobs"),
    )
    key = job_key("default", "a")
    ev = _ev("started", "r", 3, submit_time=2.0, start_time=3.0, nodes=("n1",))
    for off, msg in enumerate([_ev("submitted", "r", 2, submit_time=2.0), ev]):
        handler.job_event(Message("t", 0, off, key, encode_message(msg)))
    handler.job_event(Message("t", 0, 2, key, encode_message(_roster(60))))
    last = Message("t", 0, 3, key, encode_message(_roster(120)))
    first = handler.job_event(last)
    assert len(first.forwards) == 1  # r retired: its finished forwarded to CES
    again = handler.job_event(last)  # redelivered (state saved, forward lost)
    assert len(again.forwards) == 1, "a redelivered roster forwards nothing"


# 6 ---------------------------------------------------------------------------------------
def test_roster_parts_fit_the_workers_message_limit_whatever_the_ids() -> None:
    """Parts are cut on raw id bytes; JSON escapes a control character as 6 bytes."""
    ids = [f"{i:04d}" + "\x01" * 252 for i in range(600)]  # legal JobEvent ids
    for part in roster_parts("c", "a", 60.0, ids):
        assert len(encode_message(part)) <= 256 * 1024, "a part the worker dead-letters"
