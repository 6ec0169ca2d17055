"""The fault suite under load: the kill storm (SIGKILLs while a backlog drains, some
during the state restore) and one worker draining a big VC or many VCs
(:mod:`gpuhint.lab.faults.chaos`)."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

from gpuhint.lab.faults.chaos_harness import ChaosHarness, ScenarioResult, changes, finish
from gpuhint.lab.faults.chaos_workers import gaps_logged, peak_rss_mb
from gpuhint.wire.contract import JobEvent
from gpuhint.wire.topics import Topics
from streams.kafka_io import ensure_topics


class CommitWatch:
    """Samples the group's commits every second: how long did a partition's commit stay
    put while events waited behind it (the longest, over the whole scenario)?"""

    def __init__(self, chaos: ChaosHarness, prefix: str) -> None:
        self.chaos, self.prefix = chaos, prefix
        self.since: dict[int, tuple[int, float]] = {}
        self.stuck_max_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            got = self.chaos.committed_offsets(self.prefix)
            if got is None:
                continue
            now = time.monotonic()
            committed, ends = got
            for p, c in committed.items():
                prev = self.since.get(p)
                if prev is None or prev[0] != c or ends.get(p, 0) <= c:
                    self.since[p] = (c, now)
                else:
                    self.stuck_max_s = max(self.stuck_max_s, now - prev[1])


def kill_storm_run(
    chaos: ChaosHarness, timeout_s: float, kills: int = 4, workers: int = 1, seed: int = 1
) -> ScenarioResult:
    """One run of the kill storm: the whole trace waits in Kafka (a backlog), then
    ``workers`` workers start and are SIGKILLed ``kills`` times at random points and
    restarted at once; at least two kills land while a restarted worker restores its
    state from the changelog (within ~3 s of its start). Every job's first and final
    priority is compared with the reference."""
    rng = random.Random(seed)
    with chaos.scenario(f"kill_storm_w{workers}_s{seed}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        ensure_topics(chaos.kafka.bootstrap, Topics(prefix), chaos.partitions)
        chaos.send(recs)  # the backlog, before any worker
        with CommitWatch(chaos, prefix) as watch:
            for slot in range(workers):
                w.start(slot)
            during_restore = (
                set(rng.sample(range(1, kills), min(2, kills - 1))) if kills > 1 else set()
            )
            for i in range(kills):
                if i in during_restore:
                    time.sleep(rng.uniform(0.5, 3.0))  # the successor is still restoring
                else:
                    seen = changes(chaos, prefix)
                    want = seen + rng.randint(200, max(400, len(chaos.events) // (2 * kills)))
                    deadline = time.monotonic() + timeout_s / (kills + 1)
                    while changes(chaos, prefix) < want and time.monotonic() < deadline:
                        time.sleep(0.05)
                slot = rng.randrange(workers)
                if slot in w.procs:
                    w.kill(slot)
                    res.kills += 1
                    w.start(slot)
            finish(chaos, prefix, res, w, timeout_s)
            res.stuck_commit_max_s = round(watch.stuck_max_s, 1)
        res.gaps_sought_back = gaps_logged(w)
        chaos.compare_first(prefix, res)
    return res


def kill_storm(
    chaos: ChaosHarness,
    timeout_s: float,
    seeds: tuple[int, ...] = (1, 2, 3),
    workers: tuple[int, ...] = (1, 2),
    kills: int = 4,
) -> ScenarioResult:
    """:func:`kill_storm_run` for every seed and worker count; the counts summed."""
    total = ScenarioResult("kill_storm")
    runs = 0
    for n in workers:
        for seed in seeds:
            r = kill_storm_run(chaos, timeout_s, kills=kills, workers=n, seed=seed)
            runs += 1
            for f in (
                "lost_hints",
                "extra_hints",
                "wrong_priority",
                "dead_letters",
                "bad_messages_sent",
                "worker_crashes",
                "lost_first_hints",
                "wrong_first_priority",
                "kills",
                "gaps_sought_back",
            ):
                setattr(total, f, getattr(total, f) + getattr(r, f))
            total.wall_s = round(total.wall_s + r.wall_s, 1)
            total.settled = total.settled and r.settled
            total.stuck_commit_max_s = max(total.stuck_commit_max_s, r.stuck_commit_max_s)
            if not r.ok:
                total.notes.append(f"{r.name}: {json.dumps(r.as_json())}"[:400])
    total.runs = runs
    total.events = len(chaos.events) * runs
    return total


def big_vc_events(waiting: int = 25_000, cluster: str = "chaos") -> list[JobEvent]:
    """One VC with ``waiting`` jobs submitted and never started (one large sweep), and a
    small VC beside it whose jobs run and finish: nothing the big one does may stop it."""
    raw: list[dict[str, Any]] = [
        dict(phase="submitted", job_id=f"sweep-{i}", vc="sweep", user="u1", num_gpus=1,
             time=float(i), submit_time=float(i))
        for i in range(waiting)
    ]  # fmt: skip
    for i in range(200):
        t = float(i * 10)
        base = dict(job_id=f"small-{i}", vc="small", user="u2", num_gpus=2, submit_time=t)
        raw.append(dict(base, phase="submitted", time=t))
        if i % 4:  # three in four run; the rest wait
            raw.append(dict(base, phase="started", time=t + 1, start_time=t + 1))
            raw.append(
                dict(base, phase="finished", time=t + 5, start_time=t + 1,
                     duration_s=4.0)
            )  # fmt: skip
    evs = [JobEvent.model_validate(dict(r, cluster=cluster)) for r in raw]
    return sorted(evs, key=lambda e: e.time)


def many_vcs_events(vcs: int = 100_000, cluster: str = "chaos") -> list[JobEvent]:
    """``vcs`` distinct VCs, one waiting job each (a producer naming a VC per sweep)."""
    return [
        JobEvent.model_validate(
            dict(
                phase="submitted",
                job_id=f"j{i}",
                cluster=cluster,
                vc=f"vc{i}",
                num_gpus=1,
                time=float(i),
                submit_time=float(i),
            )
        )
        for i in range(vcs)
    ]


def load_run(chaos: ChaosHarness, timeout_s: float, name: str) -> ScenarioResult:
    """One worker drains the whole trace (already in Kafka); its peak RSS is recorded.
    For ``big_vc`` / ``many_vcs`` (their events are the chaos' trace)."""
    with chaos.scenario(name) as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        ensure_topics(chaos.kafka.bootstrap, Topics(prefix), chaos.partitions)
        chaos.send(recs)
        w.start()
        finish(chaos, prefix, res, w, timeout_s)
        res.rss_max_mb = peak_rss_mb(w)
        res.events = len(recs)
    return res
