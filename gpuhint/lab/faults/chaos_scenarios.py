"""The fault scenarios: a worker SIGKILLed, two workers and one killed, the broker or
Redis down a while, hostile messages, resent events (:mod:`gpuhint.lab.faults.chaos`)."""

from __future__ import annotations

import random
import time

from agents.publisher import Record
from gpuhint.lab.faults.chaos_harness import (
    ChaosHarness,
    ScenarioResult,
    changes,
    finish,
    first_change,
    replay_in_thread,
)
from gpuhint.lab.local.services import kill_process


def reference(chaos: ChaosHarness, timeout_s: float, bad: int = 0, seed: int = 1) -> ScenarioResult:
    name = "reference" if not bad else f"malformed_{bad}"
    with chaos.scenario(name) as (prefix, res, w):
        recs, res.bad_messages_sent = chaos.records(prefix, bad, seed)
        w.start()
        chaos.send(recs)
        finish(chaos, prefix, res, w, timeout_s)
    return res


def malformed(
    chaos: ChaosHarness, timeout_s: float, bad: int = 10_000, seed: int = 1
) -> ScenarioResult:
    return reference(chaos, timeout_s, bad=bad, seed=seed)


def sigkill_worker(chaos: ChaosHarness, timeout_s: float, kills: int = 3) -> ScenarioResult:
    """SIGKILL the worker ``kills`` times, each time once its successor is writing again."""
    with chaos.scenario(f"sigkill_worker_x{kills}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        th = replay_in_thread(chaos, recs)
        w.start()
        seen = 0
        for i in range(kills):
            if not first_change(chaos, prefix, timeout_s, after=seen):
                res.notes.append(f"kill {i + 1}: the worker wrote nothing new; not killed")
                break
            time.sleep(0.2 * i)  # at the first write, then a little later each time
            w.kill()
            res.kills += 1
            seen = changes(chaos, prefix)
            w.start()
        th.join()
        finish(chaos, prefix, res, w, timeout_s)
    return res


def rebalance(chaos: ChaosHarness, timeout_s: float) -> ScenarioResult:
    """Two workers share the partitions; one is SIGKILLed once both hold some."""
    with chaos.scenario("two_workers_one_killed") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        w.start(0)
        w.start(1)
        half = len(recs) // 2
        chaos.send(recs[:half])
        first_change(chaos, prefix, timeout_s)
        time.sleep(15.0)  # the group settles: both members own partitions
        th = replay_in_thread(chaos, recs[half:])
        time.sleep(1.0)
        w.kill(1)  # mid-stream: its partitions move to worker 0
        t_kill = time.monotonic()
        th.join()
        finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_kill, 1)
    return res


def broker_down(chaos: ChaosHarness, timeout_s: float, down_s: float = 30.0) -> ScenarioResult:
    with chaos.scenario(f"broker_down_{down_s:.0f}s") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        w.start()
        half = len(recs) // 2
        chaos.send(recs[:half])
        first_change(chaos, prefix, timeout_s)
        kill_process(chaos.kafka)
        lines0 = w.log_lines()
        th = replay_in_thread(chaos, recs[half:])  # the replay keeps retrying meanwhile
        time.sleep(down_s)
        rate = (w.log_lines() - lines0) / down_s
        res.notes.append(f"worker log lines/s while the broker was down: {rate:.1f}")
        chaos.kafka.start()
        t_back = time.monotonic()
        th.join()
        finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_back, 1)
    return res


def redis_restart(chaos: ChaosHarness, timeout_s: float, aof: bool = False) -> ScenarioResult:
    name = "redis_restart_aof" if aof else "redis_restart_empty"
    with chaos.scenario(name) as (prefix, res, w):
        chaos.kill_redis()
        chaos.start_redis(persist=aof, fresh=True)
        recs, _ = chaos.records(prefix, 0, 0)
        w.start()
        half = len(recs) // 2
        chaos.send(recs[:half])
        first_change(chaos, prefix, timeout_s)
        time.sleep(1.0)
        chaos.kill_redis()
        th = replay_in_thread(chaos, recs[half:])
        time.sleep(5.0)
        chaos.start_redis(persist=aof, fresh=not aof)
        t_back = time.monotonic()
        th.join()
        finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_back, 1)
    chaos.kill_redis()
    chaos.start_redis(persist=False, fresh=True)
    return res


def resent(records: list[Record], share: float, seed: int) -> tuple[list[Record], int]:
    """``records`` with ``share`` of them sent a second time, 1-300 records later (as a
    producer's retry does: a new record, a new offset, same key)."""
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(len(records)), max(1, int(len(records) * share))))
    later: dict[int, list[Record]] = {}
    for i in picks:
        later.setdefault(min(len(records) - 1, i + rng.randint(1, 300)), []).append(records[i])
    out: list[Record] = []
    for i, rec in enumerate(records):
        out.append(rec)
        out.extend(later.get(i, []))
    return out, len(picks)


def duplicates(
    chaos: ChaosHarness, timeout_s: float, share: float = 0.01, seed: int = 1
) -> ScenarioResult:
    """1% of the job events resent (a new record each): every job's first and final
    priority must equal the reference's, which saw each event once."""
    with chaos.scenario(f"duplicates_{share:.0%}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        recs, n = resent(recs, share, seed)
        res.notes.append(f"{n} events resent")
        w.start()
        chaos.send(recs)
        finish(chaos, prefix, res, w, timeout_s)
        chaos.compare_first(prefix, res)
    return res
