"""Benchmark: CES forecaster update + policy step per second on one core.

    python bench/bench_ces.py [--slots N] [--series FILE] [--json]
    python bench/bench_ces.py --tracker [--nodes 10000] [--seconds 60] [--json]

Uses a synthetic daily-cycle series of a 420-node cluster unless ``--series`` names a
load series. Target: >= 5,000 steps/s (one step = one slot of one cluster).

``--tracker``: a ``--nodes`` cluster whose agents report every ``--interval`` s (10 s:
10,000 nodes -> 1,000 msg/s needed), NodeStatus through
:class:`~gpuhint.cores.pipeline.cluster_load.ClusterLoadProcessor` (what the worker's cluster-load
agent
runs per message), with ``checkpoint_dirty()`` after every ``--batch`` messages (the
worker's cadence: a full batch is ``batch_max`` = 500 when it falls behind; at exactly
1,000 msg/s with ``batch_within_s`` = 0.05 a batch is 50 messages, so both are run).
Messages are built before the clock starts (parsing is the handler's cost, not timed).
"new" is this tree's tracker and checkpoint; "old" is the tracker before issue 10
(``bench/bench_ces_reference.py``, every message recounts all nodes) with its full
pickle checkpoint, run on ``--old-seconds`` of traffic (it is slow).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree, not an install

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker
from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import NodeStatus
from models.forecast import LoadForecaster
from models.power_policy import PowerPolicy, PowerPolicyConfig

SLOT_S = 600


def bench_steps(args: argparse.Namespace) -> None:
    if args.series:
        from gpuhint.lab.traces.loadseries import read_series

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
    if args.json:
        print(json.dumps({"steps": n, "seconds": dt, "steps_per_s": n / dt}))
        return
    print(f"{n} steps in {dt:.2f} s: {n / dt:,.0f} steps/s ({dt / n * 1e6:.0f} us/step)")


# -- --tracker ---------------------------------------------------------------------------


def _reference() -> Any:
    path = Path(__file__).resolve().parent / "bench_ces_reference.py"
    spec = importlib.util.spec_from_file_location("ces_reference_v1", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ces_reference_v1"] = mod
    spec.loader.exec_module(mod)
    return mod


class _OldProcessor(ClusterLoadProcessor):
    """The checkpoint before issue 10: tracker and engine objects pickled whole."""

    def checkpoint(self, cluster: str) -> None:
        state = (1, self.tracker.clusters.get(cluster), self.engine.clusters.get(cluster))
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self.saves += 1
        self.bytes_saved += len(blob)
        self.checkpoints[cluster] = blob  # type: ignore[index]


def telemetry(nodes: int, interval: float, start: float, seconds: float) -> list[NodeStatus]:
    """Reports of ``nodes`` agents every ``interval`` s from ``start``, in arrival order.

    70 % of nodes busy (5 % flip per report), 3 % powered down and silent after their
    first report (they go stale), arrival jitter of 0.5 s (partitions interleave).
    """
    rng = random.Random(1)
    names = [f"node-{i:05d}" for i in range(nodes)]
    busy = [rng.random() < 0.7 for _ in names]
    silent = {i for i in range(nodes) if rng.random() < 0.03}
    phase = [rng.uniform(0, interval) for _ in names]
    out: list[tuple[float, float, int]] = []
    rounds = math.ceil(seconds / interval) + 1
    for i in range(nodes):
        for r in range(1 if i in silent else rounds):
            t = start + phase[i] + r * interval
            if t - start < seconds:
                out.append((t + rng.uniform(0, 0.5), t, i))
    out.sort()
    msgs = []
    for _, t, i in out:
        if rng.random() < 0.05:
            busy[i] = not busy[i]
        msgs.append(
            NodeStatus(
                cluster="big", node=names[i], time=t, num_gpus=8, busy_gpus=8 if busy[i] else 0
            )
        )
    return msgs


def run_tracker(
    proc: ClusterLoadProcessor, warm: list[NodeStatus], msgs: list[NodeStatus], batch: int
) -> dict[str, Any]:
    for m in warm:
        proc.on_message(m)
    proc.checkpoint_dirty()
    proc.saves = proc.bytes_saved = 0
    ck = 0.0
    closed = 0
    t0 = time.perf_counter()
    for k in range(0, len(msgs), batch):
        for m in msgs[k : k + batch]:
            closed += len(proc.on_message(m))
        c0 = time.perf_counter()
        proc.checkpoint_dirty()
        ck += time.perf_counter() - c0
    dt = time.perf_counter() - t0
    return {
        "messages": len(msgs),
        "seconds": dt,
        "msg_per_s": len(msgs) / dt,
        "us_per_msg": dt / len(msgs) * 1e6,
        "checkpoints": proc.saves,
        "checkpoint_ms": ck / max(1, proc.saves) * 1e3,
        "checkpoint_bytes": proc.bytes_saved / max(1, proc.saves),
        "checkpoint_share": ck / dt,
        "slots_closed": closed,
    }


def bench_tracker(args: argparse.Namespace) -> None:
    needed = args.nodes / args.interval
    start = 10 * SLOT_S - args.seconds / 2  # a slot closes mid-run
    warm = telemetry(args.nodes, args.interval, start - args.interval, args.interval)
    msgs = telemetry(args.nodes, args.interval, start, args.seconds)
    old_msgs = msgs[: int(len(msgs) * min(1.0, args.old_seconds / args.seconds))]
    ref = _reference() if args.old_seconds > 0 else None
    batches = sorted({args.batch, max(1, math.ceil(needed * args.within))}, reverse=True)
    results: dict[str, Any] = {}
    for b in batches:
        proc = ClusterLoadProcessor(ClusterLoadTracker(), CesEngine(InMemoryStore()), {})
        results[f"new_batch{b}"] = run_tracker(proc, warm, msgs, b)
        if ref is not None:
            old = _OldProcessor(ref.ReferenceTracker(), CesEngine(InMemoryStore()), {})
            results[f"old_batch{b}"] = run_tracker(old, warm, old_msgs, b)
    for r in results.values():
        r["keeps_up"] = r["msg_per_s"] >= needed
        r["ratio_to_needed"] = r["msg_per_s"] / needed
    out = {
        "nodes": args.nodes,
        "interval_s": args.interval,
        "needed_msg_per_s": needed,
        "batches": batches,
        "results": results,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.nodes} nodes every {args.interval:g} s: {needed:,.0f} msg/s needed (one core)")
    for name, r in results.items():
        print(
            f"  {name:>14}: {r['msg_per_s']:>9,.0f} msg/s ({r['ratio_to_needed']:.2f}x needed, "
            f"{'keeps up' if r['keeps_up'] else 'FALLS BEHIND'}), {r['us_per_msg']:.1f} us/msg, "
            f"checkpoint {r['checkpoint_ms']:.2f} ms / {r['checkpoint_bytes'] / 1e3:.0f} kB "
            f"({r['checkpoint_share']:.0%} of the time), {r['messages']} msgs"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--slots", type=int, default=20_000)
    ap.add_argument("--series", help="a load series to replay instead of the synthetic one")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--tracker", action="store_true", help="the node-status path (see above)")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=10.0, help="report interval, s")
    ap.add_argument("--seconds", type=float, default=60.0, help="simulated seconds (new)")
    ap.add_argument("--old-seconds", type=float, default=5.0, help="of those for old; 0: skip")
    ap.add_argument("--batch", type=int, default=500, help="messages per checkpoint (full)")
    ap.add_argument("--within", type=float, default=0.05, help="batch_within_s of the worker")
    args = ap.parse_args()
    if args.tracker:
        bench_tracker(args)
    else:
        bench_steps(args)


if __name__ == "__main__":
    main()
