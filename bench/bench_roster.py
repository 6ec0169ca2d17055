"""What job rosters cost: the worker's roster pass, and the agent's parts, against the
job events that built the same state, in one run.

A VC holds ``--jobs`` jobs (90% waiting, 10% running, the default model); one roster
lists them all (nothing to retire: the usual case), then two rosters leave 1% out (they
are retired). The figure to read is the ratio: a roster pass costs about as much as how
many job events? The agent side is :func:`gpuhint.cores.job_roster.roster_parts` plus
encoding, per roster. Times are the best of ``--runs``.

    python bench/bench_roster.py [--jobs 1000,10000,50000] [--runs 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from collections.abc import Callable
from datetime import date
from functools import partial

from gpuhint.cores.job_roster import roster_parts
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, encode_message
from models.registry import DEFAULT_MODEL, make_model


def _events(n: int) -> list[JobEvent]:
    evs = []
    for i in range(n):
        t = float(i)
        common = dict(job_id=f"j{i}", vc="v", user=f"u{i % 50}", num_gpus=1 + i % 8)
        evs.append(JobEvent(phase="submitted", time=t, submit_time=t, **common))  # type: ignore[arg-type]
        if i % 10 == 0:
            evs.append(JobEvent(phase="started", time=t, submit_time=t, start_time=t, **common))  # type: ignore[arg-type]
    return evs


def _best(runs: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(runs))


def _build(evs: list[JobEvent]) -> tuple[HintEngine, float]:
    engine = HintEngine(partial(make_model, DEFAULT_MODEL), InMemoryStore(), clock=lambda: 0.0)
    t0 = time.perf_counter()
    for ev in evs:
        engine.on_job_event(ev)
    return engine, time.perf_counter() - t0


def _rosters(engine: HintEngine, ids: list[str], epoch: float) -> float:
    t0 = time.perf_counter()
    for part in roster_parts("default", "v", epoch, ids):
        engine.on_roster(part)
    return time.perf_counter() - t0


def measure(n: int, runs: int) -> dict[str, float]:
    evs = _events(n)
    ids = [f"j{i}" for i in range(n)]
    kept = [j for k, j in enumerate(ids) if k % 100]  # 1% left out
    out: dict[str, float] = {}

    def build() -> float:
        return _build(evs)[1]

    def listed() -> float:
        engine, _ = _build(evs)
        return _rosters(engine, ids, 1e9)

    def retiring() -> float:
        engine, _ = _build(evs)
        first = _rosters(engine, kept, 1e9)
        second = _rosters(engine, kept, 1e9 + 300)
        assert engine.stats.retired == n - len(kept)
        return first + second

    def agent() -> float:
        t0 = time.perf_counter()
        for part in roster_parts("default", "v", 1e9, ids):
            encode_message(part)
        return time.perf_counter() - t0

    out["events"] = len(evs)
    out["build_s"] = _best(runs, build)
    out["roster_s"] = _best(runs, listed)
    out["two_rosters_retiring_1pct_s"] = _best(runs, retiring)
    out["agent_parts_s"] = _best(runs, agent)
    out["parts"] = len(roster_parts("default", "v", 1e9, ids))
    out["roster_bytes"] = sum(len(encode_message(p)) for p in roster_parts("c", "v", 1e9, ids))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", default="1000,10000,50000", help="VC sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="best of N")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # the retirements' log lines are not what is timed
    print(
        f"# {date.today()} {platform.machine()} {os.cpu_count()} cores "
        f"Python {platform.python_version()}, model {DEFAULT_MODEL}"
    )
    print(
        "| jobs in the VC | parts | roster bytes | one roster (ms) | = job events | "
        "two rosters retiring 1% (ms) | agent: parts + encode (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.jobs.split(",")):
        r = measure(n, args.runs)
        per_event = r["build_s"] / r["events"]
        print(
            f"| {n:,} | {r['parts']:.0f} | {r['roster_bytes']:,.0f} | {r['roster_s'] * 1e3:.1f} | "
            f"{r['roster_s'] / per_event:,.0f} | {r['two_rosters_retiring_1pct_s'] * 1e3:.1f} | "
            f"{r['agent_parts_s'] * 1e3:.1f} |"
        )


if __name__ == "__main__":
    main()
