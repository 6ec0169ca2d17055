"""Fault suite, long version: every scenario of gpuhint.lab.faults.chaos on real servers.

    python bench/chaos.py --json                   # all scenarios, JSON on stdout
    python bench/chaos.py --scenario reference --scenario malformed_10000
    python bench/chaos.py --scenario kill_storm --trace ../shared/traces/itp/cluster04.csv \
        --spread-vcs 8 --seeds 1-10 --json         # the kill storm on a big backlog

kill_storm: the whole trace waits in Kafka, then 1 and 2 workers (``--workers``) are
SIGKILLed ``--kills`` times each run (at least two kills while a restarted worker
restores its state), one run per seed and worker count; its counts are summed over
the runs, and every job's *first* published priority is compared too.

big_vc / many_vcs: one worker drains a VC with ``--big-vc`` waiting jobs (beside a
small VC that must keep working), or ``--many-vcs`` VCs with one job each; reported
with the worker's crashes and peak RSS (``rss_max_mb``). Each runs on its own servers.

Each scenario replays the Philly excerpt (cut so that jobs are left pending) through a
real Kafka broker into real ``gpuhint worker`` processes and a real Redis, injects its
fault, waits until every job event is committed, and compares each hint's presence and
priority with an uninterrupted in-process reference. Exit 1 if any scenario misses the
targets (all counts zero, dead_letters == bad_messages_sent).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuhint.lab.faults.chaos import (  # noqa: E402
    SCENARIOS,
    Chaos,
    ScenarioResult,
    big_vc_events,
    load_run,
    many_vcs_events,
)
from gpuhint.lab.traces.readers import job_events, parse_time, read_trace  # noqa: E402
from gpuhint.wire.topics import spread_vc  # noqa: E402

TRACE = REPO / "tests" / "data" / "philly_excerpt.json"
CUT = "2017-10-08 00:00:00"


def _mem_gb() -> int:
    try:
        with open("/proc/meminfo") as f:
            return round(int(f.readline().split()[1]) / 1024**2)
    except (OSError, ValueError, IndexError):
        return 0


def _ints(spec: str) -> tuple[int, ...]:
    """``1-3`` -> (1, 2, 3); ``1,4`` -> (1, 4)."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--scenario",
        action="append",
        choices=sorted([*SCENARIOS, "big_vc", "many_vcs"]),
        help="repeatable (default: all)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--model", default="history_mix", help="duration model (GPUHINT_MODEL)")
    p.add_argument("--timeout", type=float, default=300.0, help="settle timeout per scenario")
    p.add_argument("--bad", type=int, default=10_000, help="hostile messages in malformed_*")
    p.add_argument(
        "--trace",
        type=Path,
        help="any trace gpuhint reads (default: the Philly excerpt up to " + CUT + ")",
    )
    p.add_argument(
        "--fraction",
        type=float,
        default=0.8,
        help="with --trace: replay this first share of its events (jobs stay pending)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="parent of the run's temporary folder (worker logs; removed at the end)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the run's folder (worker logs, broker data) and print its path",
    )
    p.add_argument("--spread-vcs", type=int, default=1, help="spread each VC over N keys")
    p.add_argument("--seeds", default="1-3", help="kill_storm seeds: 1-10 or 1,4,7")
    p.add_argument("--workers", default="1,2", help="kill_storm worker counts: 1,2")
    p.add_argument("--kills", type=int, default=4, help="kill_storm SIGKILLs per run (>= 2)")
    p.add_argument(
        "--static-membership",
        action="store_true",
        help="each worker slot keeps its GPUHINT_WORKER_INSTANCE_ID across restarts",
    )
    p.add_argument("--big-vc", type=int, default=25_000, help="big_vc: waiting jobs in one VC")
    p.add_argument("--many-vcs", type=int, default=100_000, help="many_vcs: distinct VCs")
    args = p.parse_args(argv)
    loads = {"big_vc", "many_vcs"}
    names = args.scenario or [*SCENARIOS, *sorted(loads)]
    if args.trace is None:
        cut = parse_time(CUT)
        events = [e for e in job_events(read_trace(TRACE).jobs, cluster="philly") if e.time <= cut]
        trace_name = f"{TRACE.name} up to {CUT}"
    else:
        all_events = job_events(read_trace(args.trace).jobs, cluster="chaos")
        events = all_events[: int(len(all_events) * args.fraction)]
        trace_name = f"{args.trace.name}, first {args.fraction:.0%}"
    if args.spread_vcs > 1:
        events = [
            e.model_copy(update={"vc": spread_vc(e.vc, e.user, args.spread_vcs, e.job_id)})
            for e in events
        ]
        trace_name += f", VCs spread over {args.spread_vcs}"
    cluster = events[0].cluster
    results: dict[str, ScenarioResult] = {}
    t0 = time.time()
    expected = None
    with _run_dir(args.workdir, args.keep) as tmp:
        for name in [n for n in names if n in loads]:
            evs = big_vc_events(args.big_vc) if name == "big_vc" else many_vcs_events(args.many_vcs)
            with Chaos(Path(tmp) / name, evs, "chaos", model=args.model) as c:
                results[name] = load_run(c, args.timeout, name)
        names = [n for n in names if n not in loads]
        if names:
            with Chaos(Path(tmp) / "trace", events, cluster, model=args.model) as chaos:
                chaos.static_membership = args.static_membership
                expected = len(chaos.reference)
                for name in names:
                    kw: dict[str, object] = (
                        {"bad": args.bad} if name.startswith("malformed") else {}
                    )
                    if name == "kill_storm":
                        kw = {
                            "seeds": _ints(args.seeds),
                            "workers": _ints(args.workers),
                            "kills": max(2, args.kills),
                        }
                    res = chaos.run(name, timeout_s=args.timeout, **kw)
                    results[res.name] = res
    out = {
        "command": "python bench/chaos.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "machine": f"{os.cpu_count()} cores, {_mem_gb()} GB, {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "trace": f"{trace_name}: {len(events)} events, {expected} hints expected",
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


@contextlib.contextmanager
def _run_dir(parent: Path | None, keep: bool) -> Iterator[str]:
    """The run's temporary folder; with ``keep`` it stays (its path on stderr)."""
    if not keep:
        with tempfile.TemporaryDirectory(prefix="gpuhint-chaos-", dir=parent) as tmp:
            yield tmp
        return
    tmp = tempfile.mkdtemp(prefix="gpuhint-chaos-", dir=parent)
    print(f"[chaos] run folder kept: {tmp}", file=sys.stderr, flush=True)
    yield tmp


if __name__ == "__main__":
    sys.exit(main())
