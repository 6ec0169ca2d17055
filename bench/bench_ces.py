"""Benchmark: CES forecaster update + policy step per second on one core.

    python bench/bench_ces.py [--slots N] [--series FILE]

Uses a synthetic daily-cycle series of a 420-node cluster unless ``--series`` names a
load series. Target: >= 5,000 steps/s (one step = one slot of one cluster).
"""

from __future__ import annotations

import argparse
import math
import random
import time

from models.forecast import LoadForecaster
from models.power_policy import PowerPolicy, PowerPolicyConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--slots", type=int, default=20_000)
    ap.add_argument("--series", help="a load series to replay instead of the synthetic one")
    args = ap.parse_args()
    if args.series:
        from gpuhint.loadseries import read_series

        s = read_series(args.series)
        used, total = s.used, s.total
    else:
        rng = random.Random(0)
        used = [
            max(0, min(420, round(290 + 60 * math.sin(2 * math.pi * i / 144) + rng.gauss(0, 8))))
            for i in range(args.slots)
        ]
        total = [420] * len(used)
    f = LoadForecaster()
    p = PowerPolicy(PowerPolicyConfig(), total[0])
    t0 = time.perf_counter()
    for i, (u, tot) in enumerate(zip(used, total, strict=True)):
        fc = f.update(i * 600.0, u, tot)
        p.step(i, u, tot, fc)
    dt = time.perf_counter() - t0
    n = len(used)
    print(f"{n} steps in {dt:.2f} s: {n / dt:,.0f} steps/s ({dt / n * 1e6:.0f} us/step)")


if __name__ == "__main__":
    main()
