"""The agent loop: topics and keys, drops reported, scheduler feeds, SIGTERM flush."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.cores.job_tracker import JobTracker, SchedulerFeed
from gpuhint.slurm.jobs import parse_slurm
from gpuhint.wire.contract import GpuSample, JobEvent, JobRoster, NodeStatus, decode_message
from gpuhint.wire.topics import Topics

DATA = Path(__file__).resolve().parents[1] / "data"


def agent_with(transport: MemoryTransport, **kw: object) -> NodeAgent:
    clock = kw.pop("clock", lambda: 100.0)
    return NodeAgent(
        nvml=FakeNvml(str(kw.pop("scenario", "steady")), clock=clock),  # type: ignore[arg-type]
        publisher=BufferedPublisher(transport, buffer_max=int(kw.pop("buffer_max", 1000))),  # type: ignore[call-overload]
        cluster="venus",
        node="gpu01",
        topics=Topics("tp"),
        clock=clock,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def test_tick_publishes_samples_and_status_keyed_by_cluster_and_node() -> None:
    t = MemoryTransport()
    a = agent_with(t)
    a.start()
    a.tick()
    by_topic: dict[str, list] = {}
    for r in t.records:
        assert r.key == b"venus/gpu01"
        by_topic.setdefault(r.topic, []).append(decode_message(r.value))
    assert sorted(by_topic) == ["tp.gpu-samples", "tp.node-status"]
    assert len(by_topic["tp.gpu-samples"]) == 8
    assert all(isinstance(m, GpuSample) for m in by_topic["tp.gpu-samples"])
    (status,) = by_topic["tp.node-status"]
    assert isinstance(status, NodeStatus) and status.busy_gpus == 4
    assert a.close() == 0


def test_drops_while_kafka_is_away_are_reported_in_node_status() -> None:
    t = MemoryTransport()
    t.down = True
    a = agent_with(t, buffer_max=20)
    a.start()
    for _ in range(4):  # 9 records a tick, 20 fit
        a.tick()
    assert a.publisher.dropped == 16
    t.down = False
    a.tick()
    a.publisher.flush(1.0)
    statuses = [decode_message(r.value) for r in t.records if r.topic == "tp.node-status"]
    assert isinstance(statuses[-1], NodeStatus) and statuses[-1].samples_dropped == 16


def test_slurm_feed_publishes_job_events_and_running_jobs(tmp_path: Path) -> None:
    snap = tmp_path / "squeue.json"
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())
    feed = SchedulerFeed("slurm", str(snap), parse_slurm, JobTracker(cluster="venus"))
    t = MemoryTransport()
    a = agent_with(t, feeds=[feed])
    a.start()
    a.tick()
    on_topic = [r for r in t.records if r.topic == "tp.job-events"]
    jobs = [r for r in on_topic if isinstance(decode_message(r.value), JobEvent)]
    assert len(jobs) == 7 and jobs[0].key == b"venus/vcA"
    rosters = [decode_message(r.value) for r in on_topic[len(jobs) :]]
    assert all(isinstance(r, JobRoster) for r in rosters) and rosters  # after the events
    status = [decode_message(r.value) for r in t.records if r.topic == "tp.node-status"][-1]
    assert isinstance(status, NodeStatus) and status.running_jobs == ("1002",)
    n = len(t.records)
    a.tick()  # same snapshot: no job events, only telemetry
    assert all(r.topic != "tp.job-events" for r in t.records[n:])
    snap.write_text("{broken")  # the scheduler misbehaves: telemetry keeps flowing
    a.tick()
    assert feed.failures == 1 and t.records[-1].topic == "tp.node-status"


def test_run_stops_on_the_event_and_a_broken_tick_does_not_kill_it() -> None:
    t = MemoryTransport()
    a = agent_with(t, interval_s=0.01, clock=time.time)
    calls = {"n": 0}
    real_tick = a.tick

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("bug")
        real_tick()

    a.tick = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    a.run(stop, max_ticks=4)
    assert calls["n"] == 4
    threading.Timer(0.05, stop.set).start()
    a.run(stop)
    assert stop.is_set()


def _agent_proc(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUHINT_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpuhint", "agent", "--nvml", "fake", "--node", "n1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> str:
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line:
            return seen
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"never saw {text!r}; stderr:\n{seen}")


def test_sigterm_flushes_and_exits_cleanly() -> None:
    proc = _agent_proc("--dry-run", "--interval", "3600")
    _wait_for(proc, "every 3.6e+03 s")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "SIGTERM: flushing and exiting" in err
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 9 and lines[-1]["topic"] == "gpuhint.node-status"


def test_sigterm_with_kafka_away_keeps_the_buffer_on_disk(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    proc = _agent_proc(
        "--bootstrap", "127.0.0.1:9", "--interval", "1", "--spill-dir", str(spill),
        "--flush-timeout", "1",
    )  # fmt: skip
    _wait_for(proc, "buffering")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    kept = [
        json.loads(x)
        for f in sorted(spill.glob("seg-*.jsonl"))
        for x in f.read_text().split("\n")
        if x
    ]
    assert len(kept) >= 9 and len(kept) % 9 == 0
    assert all(isinstance(decode_message(k["v"]), GpuSample | NodeStatus) for k in kept)


def test_a_tick_sends_for_at_most_one_interval() -> None:
    """A backlog to a slow broker held the tick (and the next samples) until all was sent."""
    now = [0.0]

    class Slow(MemoryTransport):
        def send(self, records, timeout_s):  # type: ignore[no-untyped-def]
            now[0] += 4.0  # each batch takes 4 s to be acknowledged
            return super().send(records, timeout_s)

    t = Slow()
    pub = BufferedPublisher(t, buffer_max=1000, batch_max=2, clock=lambda: now[0])
    for i in range(40):  # a backlog from an outage
        pub.publish("x", b"k", str(i).encode())
    a = NodeAgent(nvml=FakeNvml("steady"), publisher=pub, cluster="c", node="n", interval_s=10)
    a.start()
    a.tick()
    assert now[0] <= 12.0 and pub.pending > 0  # the next sample is not held up


def test_a_feed_watermark_is_written_only_once_its_events_are_sent(tmp_path: Path) -> None:
    """The watermark says "announced": it must not be written while the events it counts
    are still in memory (Kafka away), or a crash then would lose them for good."""
    from gpuhint.slurm.feed import slurm_feed

    snap, state = tmp_path / "squeue.json", tmp_path / "w.json"
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())
    t = MemoryTransport()
    t.down = True
    a = agent_with(t, feeds=[slurm_feed(str(snap), cluster="venus", state_path=state)])
    a.start()
    a.tick()
    assert a.publisher.in_memory > 0 and not state.exists()  # the 7 events wait in memory
    t.down = False
    a.publisher._next_try = 0.0  # no back-off wait in the test
    a.tick()
    events = [decode_message(r.value) for r in t.records if r.topic == "tp.job-events"]
    assert sum(isinstance(e, JobEvent) for e in events) == 7 and state.exists()
    restarted = slurm_feed(str(snap), cluster="venus", state_path=state)
    assert restarted.poll(200.0) == []  # all 7 were announced and are known


def test_rosters_list_each_vcs_unfinished_jobs_and_only_after_a_good_read(
    tmp_path: Path,
) -> None:
    snap = tmp_path / "squeue.json"
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())
    feed = SchedulerFeed("slurm", str(snap), parse_slurm, JobTracker(cluster="venus"))
    now = [100.0]
    t = MemoryTransport()
    a = agent_with(t, feeds=[feed], clock=lambda: now[0], roster_every_s=300.0)
    a.start()

    def rosters(since: int) -> list[JobRoster]:
        out = [decode_message(r.value) for r in t.records[since:] if r.topic == "tp.job-events"]
        return [r for r in out if isinstance(r, JobRoster)]

    a.tick()
    first = rosters(0)
    listed = {(r.vc, j) for r in first for j in r.job_ids}
    unfinished = {(vc, j) for vc, ids in feed.tracker.roster().items() for j in ids}
    assert listed == unfinished and listed  # every VC's unfinished jobs, nothing else
    assert all(r.cluster == "venus" and r.epoch == 100.0 and r.last for r in first)
    assert {r.agent for r in first} == {a.identity}  # misses count per agent
    n = len(t.records)
    now[0] = 200.0
    a.tick()
    assert rosters(n) == []  # not due yet
    snap.write_text("{broken")
    now[0] = 500.0
    a.tick()
    assert feed.failures == 1 and rosters(n) == []  # a failed read sends no roster
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())
    now[0] = 510.0
    a.tick()
    assert [r.epoch for r in rosters(n)][:1] == [510.0] and a.rosters_sent == 2


def test_no_roster_when_turned_off_or_without_a_scheduler_feed(tmp_path: Path) -> None:
    snap = tmp_path / "squeue.json"
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())
    feed = SchedulerFeed("slurm", str(snap), parse_slurm, JobTracker(cluster="venus"))
    for agent in (
        agent_with(MemoryTransport(), feeds=[feed], roster_every_s=0.0),
        agent_with(MemoryTransport()),
    ):
        agent.start()
        agent.tick()
        assert agent.rosters_sent == 0


def test_a_vc_the_scheduler_defines_gets_an_empty_roster(tmp_path: Path) -> None:
    snap = tmp_path / "squeue.json"
    snap.write_text((DATA / "slurm" / "squeue_1.json").read_text())

    class Defined(SchedulerFeed):
        def vcs(self) -> list[str]:
            return ["quiet", "bad name"]  # the second is no VC name: skipped, logged

    feed = Defined("slurm", str(snap), parse_slurm, JobTracker(cluster="venus"))
    t = MemoryTransport()
    agent = agent_with(t, feeds=[feed])
    agent.start()
    agent.tick()
    rosters = [decode_message(r.value) for r in t.records if r.topic == "tp.job-events"]
    by_vc = {r.vc: r for r in rosters if isinstance(r, JobRoster)}
    assert by_vc["quiet"].job_ids == () and by_vc["quiet"].last
    assert "bad name" not in by_vc and set(by_vc) > {"quiet"}  # the others still sent
