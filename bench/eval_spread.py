"""Scratch: what spreading a VC over N user-hashed sub-VCs costs the duration models.

Feeds a trace's job events in time order through the pure ``HintEngine`` (one model per
key, open loop: learning at the trace's finish times), once keyed by the trace's VCs and
once per ``--spread`` N (``gpuhint replay --spread-vcs N``), and reports the submit-time
prediction error (mean |log error|, median |% error|) of each.

    python bench/eval_spread.py /work/shared/traces/itp/cluster01.csv --spread 4 8 --json
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial

from gpuhint.cli.replay import spread_events
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from models.registry import make_model


def run(path: str, model: str, n: int) -> dict[str, object]:
    events = spread_events(job_events(read_trace(path).jobs, cluster="c"), n)
    engine = HintEngine(partial(make_model, model), InMemoryStore(), clock=lambda: 0.0)
    for i, ev in enumerate(events):
        engine.on_job_event(ev, offset=i)
    s = engine.stats
    return {
        "spread": n,
        "keys": len({e.vc for e in events}),
        "scored": s.scored,
        "mae_log": round(s.mae_log or 0.0, 4),
        "median_abs_pct_error": round(s.median_abs_pct_error or 0.0, 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--model", default="history_mix")
    ap.add_argument("--spread", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = [run(a.trace, a.model, n) for n in [1, *a.spread]]
    report = {"trace": a.trace, "model": a.model, "load_average": os.getloadavg(), "runs": rows}
    print(json.dumps(report, indent=2 if a.json else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
