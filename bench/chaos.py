"""Fault suite, long version: every scenario of gpuhint.testing.chaos on real servers.

    python bench/chaos.py --json                   # all scenarios, JSON on stdout
    python bench/chaos.py --scenario reference --scenario malformed_10000

Each scenario replays the Philly excerpt (cut so that jobs are left pending) through a
real Kafka broker into real ``gpuhint worker`` processes and a real Redis, injects its
fault, waits until every job event is committed, and compares each hint's presence and
priority with an uninterrupted in-process reference. Exit 1 if any scenario misses the
targets (all counts zero, dead_letters == bad_messages_sent).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuhint.testing.chaos import SCENARIOS, Chaos  # noqa: E402
from gpuhint.traces import job_events, parse_time, read_trace  # noqa: E402

TRACE = REPO / "tests" / "data" / "philly_excerpt.json"
CUT = "2017-10-08 00:00:00"


def _mem_gb() -> int:
    try:
        with open("/proc/meminfo") as f:
            return round(int(f.readline().split()[1]) / 1024**2)
    except (OSError, ValueError, IndexError):
        return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="repeatable")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--model", default="history_mix", help="duration model (GPUHINT_MODEL)")
    p.add_argument("--timeout", type=float, default=300.0, help="settle timeout per scenario")
    p.add_argument("--bad", type=int, default=10_000, help="hostile messages in malformed_*")
    args = p.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    cut = parse_time(CUT)
    events = [e for e in job_events(read_trace(TRACE).jobs, cluster="philly") if e.time <= cut]
    results = {}
    t0 = time.time()
    tmp = tempfile.TemporaryDirectory(prefix="gpuhint-chaos-")
    with tmp, Chaos(Path(tmp.name), events, "philly", model=args.model) as chaos:
        for name in names:
            kw = {"bad": args.bad} if name.startswith("malformed") else {}
            res = chaos.run(name, timeout_s=args.timeout, **kw)
            results[res.name] = res
    out = {
        "command": "python bench/chaos.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "machine": f"{os.cpu_count()} cores, {_mem_gb()} GB, {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "trace": f"{TRACE.name} up to {CUT}: {len(events)} events, "
        f"{len(chaos.reference)} hints expected",
        "model": args.model,
        "scenarios": {n: r.as_json() for n, r in results.items()},
        "all_ok": all(r.ok for r in results.values()),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for n, r in results.items():
            flag = "ok  " if r.ok else "FAIL"
            print(f"{flag} {n:26s} {json.dumps(r.as_json())}")
    return 0 if out["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
