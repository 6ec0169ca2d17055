"""Speed of the QSSF simulator: each policy on each VC of a trace, best of N runs.

The Helios artifact's simulator steps one second at a time and took 300 to 334 s per
policy on the Philly sample (issue 3); this one decides at submits and ends only.

Usage::

    python bench/bench_simulator.py TRACE [TRACE ...] [--repeat 3] [--target-load 0.9]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from gpuhint.lab.traces.readers import read_trace
from models.simulator import SimJob, simulate_vc, size_vcs

POLICIES = ("fifo", "sjf", "srtf", "qssf", "fifo+backfill")


def bench(path: str, repeat: int, target_load: float) -> None:
    jobs = [j for j in read_trace(path).jobs if j.num_gpus > 0]
    by_vc: dict[str, list[SimJob]] = defaultdict(list)
    for j in jobs:
        by_vc[j.vc].append(SimJob(j.job_id, j.submit_time, j.duration, j.num_gpus))
    sizes = size_vcs(
        {vc: [(s.submit, s.duration, s.gpus) for s in js] for vc, js in by_vc.items()},
        target_load,
    )
    print(f"{path}: {len(jobs):,} GPU jobs, {len(by_vc)} VCs, {sum(sizes.values())} nodes")
    total = 0.0
    for name in POLICIES:
        kind, _, extra = name.partition("+")
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for vc, js in by_vc.items():
                prios = [s.service for s in js] if kind == "qssf" else None
                simulate_vc(
                    js,
                    sizes[vc],
                    kind,
                    priorities=prios,
                    backfill=extra == "backfill",  # type: ignore[arg-type]
                )
            best = min(best, time.perf_counter() - t0)
        total += best
        print(f"  {name:<14} {best * 1000:8.1f} ms  {len(jobs) / best:>12,.0f} jobs/s")
    print(f"  {'all':<14} {total * 1000:8.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target-load", type=float, default=0.9)
    args = ap.parse_args()
    for path in args.traces:
        bench(path, args.repeat, args.target_load)


if __name__ == "__main__":
    main()
