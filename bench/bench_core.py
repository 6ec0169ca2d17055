"""Job events per second through the embedded core (HintEngine + in-memory store).

This is the path ``gpuhint demo`` runs and the Faust worker wraps: contract objects in,
model predict/learn, hint building, buffered store writes and flushes. Every model of
the registry runs on the same event list in one process, so the figures compare as
ratios. Events are the shipped Venus excerpt (or ``--trace``) repeated ``--repeat``
times with fresh job ids. Two rates: per wall-clock second, and per second of this
process's CPU time (``time.process_time``), which other work on a shared machine
disturbs far less; ``--runs N`` keeps the best of N runs of each.

    python bench/bench_core.py [--trace FILE] [--repeat 5] [--models history,history_mix]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from datetime import date
from functools import partial

from gpuhint.cli.demo import shipped_trace
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent
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


def run(model: str, evs: list[JobEvent], flush_every: int) -> tuple[float, float]:
    """(events per wall second, events per CPU second) of one run."""
    store = InMemoryStore()
    engine = HintEngine(partial(make_model, model), store)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    for i, ev in enumerate(evs, 1):
        engine.on_job_event(ev)
        if i % flush_every == 0:
            store.flush()
    store.flush()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(evs) / wall, len(evs) / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", default=str(shipped_trace()))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(DURATION_MODELS))
    ap.add_argument("--flush-every", type=int, default=500, help="events between flushes")
    ap.add_argument("--runs", type=int, default=1, help="best of N runs per model")
    args = ap.parse_args()
    evs = events(args.trace, args.repeat)
    models = args.models.split(",")
    runs: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    for _ in range(max(1, args.runs)):  # interleaved: a load spike hits every model alike
        for m in models:
            runs[m].append(run(m, evs, args.flush_every))
    wall = {m: max(r[0] for r in rs) for m, rs in runs.items()}
    cpu = {m: max(r[1] for r in rs) for m, rs in runs.items()}
    best = max(wall.values())
    print(
        f"embedded core, {len(evs):,} job events ({args.trace} x {args.repeat}), "
        f"{platform.machine()}, {platform.python_version()}, {date.today()}, "
        f"best of {max(1, args.runs)}, load average {os.getloadavg()[0]:.2f}"
    )
    print("| model | job events/s | per CPU second | ratio to fastest |")
    print("|---|---:|---:|---:|")
    for m in models:
        tag = " (default)" if m == DEFAULT_MODEL else ""
        print(f"| {m}{tag} | {wall[m]:,.0f} | {cpu[m]:,.0f} | {wall[m] / best:.3f} |")


if __name__ == "__main__":
    main()
