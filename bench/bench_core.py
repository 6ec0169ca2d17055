"""Job events per second through the embedded core (HintEngine + in-memory store).

This is the path ``gpuhint demo`` runs and the Faust worker wraps: contract objects in,
model predict/learn, hint building, buffered store writes and flushes. Every model of
the registry runs on the same event list in one process, so the figures compare as
ratios. Events are the shipped Venus excerpt (or ``--trace``) repeated ``--repeat``
times with fresh job ids.

    python bench/bench_core.py [--trace FILE] [--repeat 5] [--models history,history_mix]
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from datetime import date
from functools import partial

from gpuhint.cli.demo import shipped_trace
from gpuhint.contract import JobEvent
from gpuhint.core import HintEngine
from gpuhint.store import InMemoryStore
from gpuhint.traces import job_events, read_trace
from models.registry import DEFAULT_MODEL, DURATION_MODELS, make_model


def events(trace: str, repeat: int) -> list[JobEvent]:
    jobs = read_trace(trace).jobs
    base = job_events(jobs)
    span = (max(e.time for e in base) - min(e.time for e in base)) + 1
    out: list[JobEvent] = []
    for k in range(repeat):
        for e in base:
            out.append(
                e.model_copy(
                    update={
                        "job_id": f"{e.job_id}#{k}",
                        "time": e.time + k * span,
                        "submit_time": e.submit_time + k * span,
                    }
                )
            )
    return out


def run(model: str, evs: list[JobEvent], flush_every: int) -> float:
    store = InMemoryStore()
    engine = HintEngine(partial(make_model, model), store)
    gc.collect()
    t0 = time.perf_counter()
    for i, ev in enumerate(evs, 1):
        engine.on_job_event(ev)
        if i % flush_every == 0:
            store.flush()
    store.flush()
    return len(evs) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", default=str(shipped_trace()))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(DURATION_MODELS))
    ap.add_argument("--flush-every", type=int, default=500, help="events between flushes")
    args = ap.parse_args()
    evs = events(args.trace, args.repeat)
    rates = {m: run(m, evs, args.flush_every) for m in args.models.split(",")}
    best = max(rates.values())
    print(
        f"embedded core, {len(evs):,} job events ({args.trace} x {args.repeat}), "
        f"{platform.machine()}, {platform.python_version()}, {date.today()}"
    )
    print("| model | job events/s | ratio to fastest |")
    print("|---|---:|---:|")
    for m, r in rates.items():
        tag = " (default)" if m == DEFAULT_MODEL else ""
        print(f"| {m}{tag} | {r:,.0f} | {r / best:.3f} |")


if __name__ == "__main__":
    main()
