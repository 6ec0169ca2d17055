"""Memory and record sizes of the worker's per-VC state (:class:`TableStates`).

Many VCs (default): ``--vcs`` distinct VCs go through :class:`~gpuhint.cores.qssf.HintEngine`
over :class:`~gpuhint.cores.pipeline.state_table.TableStates` and a plain dict (what Faust's memory
store is to the worker), VC after VC (``--interleave``: one event of every VC in turn,
so that every VC is active at once): ``--jobs`` job lifecycles each (submitted,
started, finished) and ``--waiting`` submitted jobs left waiting. The dirty states are
saved (``save_dirty()``) every ``--save-every`` events, as the worker's save cadence
does. Reported: RSS before and after (current, ``VmRSS`` of ``/proc/self/status``; and
the peak, ``ru_maxrss``), the live (decoded) states left, the backing's bytes per VC
(values alone, and with Python's per-entry objects) and the time taken. Hint writes go
to a store that drops them (Redis holds them, not the worker). ``--max-live`` is the
bound on live states (a huge value: no bound, as before it existed).

``--big-vc N``: one VC with ``N`` waiting jobs instead: its record's size, how many
parts it is split into (``--max-record-bytes``), and the time to save it and to load
it back (a fresh :class:`TableStates` decoding it).

    python bench/bench_state.py [--vcs 100000] [--jobs 1] [--waiting 1] [--max-live 2000]
                                [--interleave] [--model history_mix] [--json]
    python bench/bench_state.py --big-vc 25000 [--json]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree, not an install
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import print_result

from gpuhint.cores.pipeline.state_table import (
    DEFAULT_MAX_LIVE,
    DEFAULT_MAX_RECORD_BYTES,
    TableStates,
    is_part_key,
)
from gpuhint.cores.qssf import HintEngine, state_key
from gpuhint.cores.sink import InMemoryStore, Op
from gpuhint.wire.contract import JobEvent, JobPhase
from models.registry import DEFAULT_MODEL, make_model

CLUSTER = "bench"


class DroppingStore(InMemoryStore):
    """A store whose flushes drop the writes: the hints live in Redis, not here."""

    def _apply(self, ops: list[Op]) -> None:
        return None


def rss_mb() -> float:
    """The current resident set size (``VmRSS``), MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def max_rss_mb() -> float:
    """The peak resident set size so far (``ru_maxrss``: KB on Linux), MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def job(i: int, vc: str, phase: str, t: float, tag: str = "j") -> JobEvent:
    dur = 60.0 + (i * 37) % 3600
    return JobEvent(
        phase=JobPhase(phase),
        job_id=f"{tag}{i}",
        cluster=CLUSTER,
        vc=vc,
        user=f"u{i % 97}",
        num_gpus=2 ** (i % 4),
        time=t + (1 + dur if phase == "finished" else 1 if phase == "started" else 0),
        submit_time=t,
        duration_s=dur if phase == "finished" else None,
    )


def vc_event(v: int, k: int, jobs: int, waiting: int, t: float) -> JobEvent:
    """Event ``k`` of VC ``v``: its ``jobs`` lifecycles, then its ``waiting`` submits."""
    vc = f"vc{v}"
    if k < 3 * jobs:
        return job(v * jobs + k // 3, vc, ("submitted", "started", "finished")[k % 3], t)
    return job(v * waiting + k - 3 * jobs, vc, "submitted", t, tag="w")


def backing_bytes(table: dict[str, bytes]) -> tuple[int, int]:
    """(the values' bytes, the keys and values as Python objects plus the dict)."""
    values = sum(len(v) for v in table.values())
    objects = sys.getsizeof(table) + sum(
        sys.getsizeof(k) + sys.getsizeof(v) for k, v in table.items()
    )
    return values, objects


def machine() -> dict[str, Any]:
    return {
        "command": " ".join(["python", "bench/bench_state.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": list(os.getloadavg()),
    }


def many_vcs(args: argparse.Namespace) -> dict[str, Any]:
    gc.collect()
    rss0, peak0 = rss_mb(), max_rss_mb()
    table: dict[str, bytes] = {}
    states = TableStates(table, max_live=args.max_live, max_record_bytes=args.max_record_bytes)
    store = DroppingStore()
    engine = HintEngine(partial(make_model, args.model), store, states=states)
    t = time.time()
    events = 0
    max_live = 0
    t0 = time.perf_counter()
    per_vc = 3 * args.jobs + args.waiting
    order = (
        ((v, k) for k in range(per_vc) for v in range(args.vcs))  # round after round
        if args.interleave
        else ((v, k) for v in range(args.vcs) for k in range(per_vc))  # VC after VC
    )
    for offset, (v, k) in enumerate(order):
        engine.on_job_event(vc_event(v, k, args.jobs, args.waiting, t), offset=offset)
        events = offset + 1
        if events % args.save_every == 0:
            store.flush()
            max_live = max(max_live, states.live)
            states.save_dirty()
    store.flush()
    states.save_dirty()
    elapsed = time.perf_counter() - t0
    gc.collect()
    rss1, peak1 = rss_mb(), max_rss_mb()
    values, objects = backing_bytes(table)
    vcs = len(states)
    assert vcs == args.vcs, (vcs, args.vcs)
    # every VC reads back (a sample): the evicted ones are decoded again
    t1 = time.perf_counter()
    sample = [state_key(CLUSTER, f"vc{v}") for v in range(0, args.vcs, max(1, args.vcs // 1000))]
    for key in sample:
        assert states[key].applied_offset >= 0
    reload_ms = (time.perf_counter() - t1) / len(sample) * 1e3
    return {
        **machine(),
        "mode": "many VCs",
        "model": args.model,
        "vcs": args.vcs,
        "events": events,
        "events_per_vc": events / args.vcs,
        "interleave": args.interleave,
        "save_every_events": args.save_every,
        "max_live": args.max_live,
        "seconds": elapsed,
        "events_per_s": events / elapsed,
        "rss_before_mb": rss0,
        "rss_after_mb": rss1,
        "max_rss_before_mb": peak0,
        "max_rss_after_mb": peak1,
        "rss_growth_per_vc_bytes": (rss1 - rss0) * 1024 * 1024 / args.vcs,
        "live_states_at_saves_max": max_live,
        "live_states_after": states.live,
        "evictions": states.evictions,
        "decodes": states.loads,
        "backing_records": len(table),
        "backing_value_bytes_per_vc": values / args.vcs,
        "backing_object_bytes_per_vc": objects / args.vcs,
        "backing_value_mb": values / 1e6,
        "backing_object_mb": objects / 1e6,
        "split_saves": states.split_saves,
        "saves": states.saves,
        "decode_one_evicted_ms": reload_ms,
    }


def big_vc(args: argparse.Namespace) -> dict[str, Any]:
    gc.collect()
    rss0, peak0 = rss_mb(), max_rss_mb()
    table: dict[str, bytes] = {}
    writes: list[tuple[str, int]] = []

    def save(k: str, b: bytes) -> None:
        writes.append((k, len(b)))
        table[k] = b

    states = TableStates(table, on_save=save, max_record_bytes=args.max_record_bytes)
    engine = HintEngine(partial(make_model, args.model), DroppingStore(), states=states)
    t = time.time()
    t0 = time.perf_counter()
    for i in range(args.big_vc):
        engine.on_job_event(job(i, "deep", "submitted", t, tag="w"), offset=i)
    engine.store.flush()
    build_s = time.perf_counter() - t0
    key = state_key(CLUSTER, "deep")

    t0 = time.perf_counter()
    pickled = states.pickle_dirty([key])
    pickle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sealed = states.seal_all(pickled)
    seal_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    states.store_encoded(sealed)
    store_s = time.perf_counter() - t0
    first = list(writes)

    # a second save of the same VC, one job deeper: a new generation, the old parts deleted
    engine.on_job_event(job(args.big_vc, "deep", "submitted", t, tag="w"), offset=args.big_vc)
    writes.clear()
    t0 = time.perf_counter()
    states.save_dirty()
    resave_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    back = TableStates(table)[key]
    load_s = time.perf_counter() - t0
    assert len(back.pending) == args.big_vc + 1 and back.applied_offset == args.big_vc
    gc.collect()
    return {
        **machine(),
        "mode": "one deep VC",
        "model": args.model,
        "waiting_jobs": args.big_vc,
        "build_s": build_s,
        "pickle_bytes": len(pickled[0][1]),
        "sealed_bytes": len(sealed[0][1]),
        "max_record_bytes": args.max_record_bytes,
        "records_written": len(first),
        "parts": sum(1 for k, _ in first if is_part_key(k)),
        "largest_record_bytes": max(n for _, n in first),
        "header_bytes": first[-1][1],
        "pickle_s": pickle_s,
        "seal_s": seal_s,
        "store_s": store_s,
        "save_total_s": pickle_s + seal_s + store_s,
        "resave_s": resave_s,
        "resave_records": len(writes),
        "table_keys_after_resave": len(table),
        "load_s": load_s,
        "rss_before_mb": rss0,
        "rss_after_mb": rss_mb(),
        "max_rss_before_mb": peak0,
        "max_rss_after_mb": max_rss_mb(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vcs", type=int, default=100_000, help="distinct VCs")
    ap.add_argument("--jobs", type=int, default=1, help="job lifecycles per VC (3 events)")
    ap.add_argument("--waiting", type=int, default=1, help="jobs left waiting per VC")
    ap.add_argument("--save-every", type=int, default=2000, help="events between saves")
    ap.add_argument("--max-live", type=int, default=DEFAULT_MAX_LIVE, help="live states bound")
    ap.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="round-robin over the VCs (every VC active at once: the worst case for the bound)",
    )
    ap.add_argument("--big-vc", type=int, default=0, help="one VC with this many waiting jobs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = big_vc(args) if args.big_vc else many_vcs(args)
    print_result(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
