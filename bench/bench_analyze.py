"""Time and peak memory of ``gpuhint analyze`` on a generated million-job Helios trace.

The trace is synthetic but shaped like Helios (``cluster_log.csv`` schema, every column
filled): 2,000 users of Zipf-like activity in 20 VCs, each user repeating a few job
templates (GPU count, log-normal duration), a daily submission rhythm, completed /
cancelled / failed states, queueing delays; so every section of the report, and the
QSSF simulation on the latest ``--qssf-jobs`` jobs, run as on a real trace.

Runs ``gpuhint analyze`` in a child process and reports its wall time and peak
resident memory (``ru_maxrss`` of the child), against the issue's target: a million
jobs in under 2 minutes and 2 GB.

Usage::

    python bench/bench_analyze.py [--jobs 1000000] [--keep TRACE] [--qssf-jobs 10000]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL")
STATE_WEIGHTS = (0.64, 0.2, 0.13, 0.02, 0.01)
GPU_CHOICES = (0, 1, 1, 1, 1, 2, 4, 8, 8, 16, 32, 64)


def generate(path: Path, n: int, seed: int = 1) -> None:
    """Write an ``n``-job Helios-schema trace to ``path``, in submit order."""
    rng = random.Random(seed)
    users = [f"u{k:04d}" for k in range(2000)]
    weights = [1 / (k + 1) ** 1.1 for k in range(len(users))]
    vcs = [f"vc{k:02d}" for k in range(20)]
    user_vc = {u: vcs[rng.randrange(len(vcs))] for u in users}
    templates = {
        u: [
            (rng.choice(GPU_CHOICES), rng.gauss(6.0, 2.0), rng.uniform(0.3, 1.5))
            for _ in range(rng.randint(1, 5))
        ]
        for u in users
    }
    t0 = datetime(2020, 4, 1, tzinfo=UTC).timestamp()
    span = 180 * 86400
    mean_gap = span / n
    t = t0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "job_id",
                "user",
                "vc",
                "gpu_num",
                "cpu_num",
                "node_num",
                "state",
                "submit_time",
                "start_time",
                "end_time",
                "duration",
                "queue",
            ]
        )
        picks = rng.choices(users, weights, k=n)
        states = rng.choices(STATES, STATE_WEIGHTS, k=n)
        for i in range(n):
            hour = ((t - t0) / 3600) % 24
            rhythm = 1.0 + 0.6 * math.sin((hour - 9) / 24 * 2 * math.pi)
            t += rng.expovariate(rhythm / mean_gap)
            u = picks[i]
            gpus, mu, sigma = rng.choice(templates[u])
            dur = max(1, round(math.exp(rng.gauss(mu, sigma))))
            queue = 0 if rng.random() < 0.6 else round(rng.expovariate(1 / 900))
            start, end = t + queue, t + queue + dur
            w.writerow(
                (
                    i + 1,
                    u,
                    user_vc[u],
                    gpus,
                    max(1, gpus) * 4,
                    max(1, math.ceil(gpus / 8)),
                    states[i],
                    _ts(t),
                    _ts(start),
                    _ts(end),
                    dur,
                    queue,
                )
            )


def _tree_rss_kb(pid: int) -> int:
    """Resident memory (kB) of ``pid`` and all its descendants, from /proc."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parent[int(d.name)] = int(fields.get("PPid", "0").strip())
        rss[int(d.name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    tree = {pid}
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in tree} - tree
        grew = bool(new)
        tree |= new
    return sum(rss.get(p, 0) for p in tree)


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--keep", metavar="TRACE", help="generate into (or reuse) this file")
    ap.add_argument("--qssf-jobs", type=int, default=10_000)
    ap.add_argument("--out", metavar="DIR", help="report folder (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(args.keep) if args.keep else Path(tmp) / "generated_cluster_log.csv"
        if not trace.exists():
            t = time.perf_counter()
            generate(trace, args.jobs)
            print(f"generated {args.jobs:,} jobs in {time.perf_counter() - t:.1f} s: {trace}")
        size = trace.stat().st_size
        out = Path(args.out) if args.out else Path(tmp) / "report"
        cmd = [
            sys.executable,
            "-m",
            "gpuhint",
            "analyze",
            str(trace),
            "-o",
            str(out),
            "--qssf-jobs",
            str(args.qssf_jobs),
            "--no-progress",
        ]
        print("$ " + " ".join(cmd[2:]))
        t = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tree_peak = 0
        while child.poll() is None:  # the whole process tree: the reader's workers too
            tree_peak = max(tree_peak, _tree_rss_kb(child.pid))
            time.sleep(0.2)
        stdout, stderr = child.communicate()
        wall = time.perf_counter() - t
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if child.returncode != 0:
            print(stderr, file=sys.stderr)
            return child.returncode
        print(stdout.rstrip())
        secs = json.loads((out / "analysis.json").read_text())["seconds"]
        print("stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()))
        tree_mb = max(
            tree_peak / 1024, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        )
        ok = wall < 120 and tree_mb < 2048
        print(
            f"\n{args.jobs:,} jobs, {size / 1e6:,.0f} MB of CSV: {wall:.1f} s wall, peak RSS "
            f"{tree_mb:,.0f} MB for the process and its workers together (largest single "
            f"process {peak_mb:,.0f} MB); target < 120 s and < 2,048 MB: "
            f"{'met' if ok else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
