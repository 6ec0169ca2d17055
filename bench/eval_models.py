"""Online accuracy of every duration model on job traces, as the worker sees the stream.

Each trace is replayed through :class:`gpuhint.cores.qssf.HintEngine` (predict at submit,
learn at finish, no look-ahead) with an in-memory store; the engine scores each
prediction when its job finishes.

Usage::

    python bench/eval_models.py TRACE [TRACE ...] [--models a,b] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from models.registry import DURATION_MODELS, make_model


def evaluate(model_name: str, events: list) -> dict[str, float | None]:  # type: ignore[type-arg]
    engine = HintEngine(partial(make_model, model_name), InMemoryStore(), clock=lambda: 0.0)
    t0 = time.perf_counter()
    for ev in events:
        engine.on_job_event(ev)
    wall = time.perf_counter() - t0
    s = engine.stats
    return {
        "jobs": s.scored,
        "mae_log": s.mae_log,
        "median_abs_pct_error": s.median_abs_pct_error,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--models", default=",".join(DURATION_MODELS))
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    results: dict[str, dict[str, dict[str, float | None]]] = {}
    for path in args.traces:
        events = job_events(read_trace(path).jobs)
        results[path.name] = {m: evaluate(m, events) for m in names}
        if not args.json:
            print(f"{path.name} ({results[path.name][names[0]]['jobs']} jobs)", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'trace':<22} " + " ".join(f"{m:>22}" for m in names))
    print(f"{'':<22} " + " ".join(f"{'MAE log / med |%|':>22}" for _ in names))
    for trace, row in results.items():
        cells = []
        for m in names:
            r = row[m]
            cells.append(f"{r['mae_log']:>10.3f} / {100 * (r['median_abs_pct_error'] or 0):>8.1f}%")
        print(f"{trace:<22} " + " ".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
