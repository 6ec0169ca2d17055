"""QSSF with gpuhint's hints on every shared trace, every model: the docs/qssf.md tables.

Runs :func:`gpuhint.lab.evaluation.qssf.evaluate_qssf` (the same as ``gpuhint evaluate qssf
--json``) per trace and model, closed loop unless ``--open-loop``, and prints a Markdown
table (QSSF / oracle, QSSF / FIFO, hint updates, MAE log, seconds) with the geometric
mean of QSSF / oracle over the traces other than Venus (the issue's target set).

    python bench/eval_qssf.py [--traces DIR] [--models a,b] [--open-loop] [--json]

Venus runs with its real VC sizes (``helios/venus_vc_config.csv``); the others are
sized to load 0.9.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from datetime import date
from pathlib import Path

from gpuhint.lab.evaluation.qssf import evaluate_qssf, read_vc_config
from gpuhint.lab.traces.readers import read_trace
from models.registry import DEFAULT_MODEL, DURATION_MODELS

TRACES = (
    ("Helios Venus excerpt (2 VCs)", "helios/venus_sept_2vc.csv", "helios/venus_vc_config.csv"),
    ("Philly sample", "philly/philly_sampled_jobs.json", None),
    *((f"ITP cluster0{k}", f"itp/cluster0{k}.csv", None) for k in range(1, 6)),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="../shared/traces", help="folder of the shared traces")
    ap.add_argument("--models", default=",".join(DURATION_MODELS), help="comma-separated")
    ap.add_argument("--open-loop", action="store_true", help="the artifact's evaluation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(args.traces)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in DURATION_MODELS:
            print(f"unknown model {m!r}; choose from {', '.join(DURATION_MODELS)}", file=sys.stderr)
            return 2
    loop = "open" if args.open_loop else "closed"
    rows: list[dict[str, object]] = []
    for label, rel, cfg in TRACES:
        path = root / rel
        if not path.is_file():
            print(f"skipping {label}: {path} not found", file=sys.stderr)
            continue
        jobs = read_trace(path).jobs
        sizes = read_vc_config(root / cfg) if cfg else None
        for m in models:
            t0 = time.perf_counter()
            rep = evaluate_qssf(jobs, model=m, vc_nodes=sizes, loop=loop)
            secs = time.perf_counter() - t0
            d = rep.as_dict()
            rows.append(
                {
                    "trace": label,
                    "model": m,
                    "qssf_avg_jct_s": rep.avg("qssf"),
                    "fifo_avg_jct_s": rep.avg("fifo"),
                    "oracle_avg_jct_s": rep.avg("qssf-oracle"),
                    "qssf_over_oracle": d["jct_ratio_qssf_over_oracle"],
                    "qssf_over_fifo": d["jct_ratio_qssf_over_fifo"],
                    "hint_updates": d["hint_updates"],
                    "mae_log": d["mae_log"],
                    "seconds": secs,
                }
            )
            print(f"{label} {m}: {d['jct_ratio_qssf_over_oracle']:.3f}", file=sys.stderr)
    geo: dict[str, float] = {}
    for m in models:
        xs = [
            float(r["qssf_over_oracle"])  # type: ignore[arg-type]
            for r in rows
            if r["model"] == m and not str(r["trace"]).startswith("Helios")
        ]
        if xs:
            geo[m] = math.exp(sum(map(math.log, xs)) / len(xs))
    if args.json:
        print(json.dumps({"loop": loop, "rows": rows, "geomean_qssf_over_oracle": geo}, indent=2))
        return 0
    print(f"loop {loop}; {date.today()}; {platform.machine()}; Python {platform.python_version()}")
    print()
    print("| trace | model | QSSF avg JCT (s) | ÷ oracle | ÷ FIFO | hint updates | MAE log | s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        default = " (default)" if r["model"] == DEFAULT_MODEL else ""
        mae = r["mae_log"]
        print(
            f"| {r['trace']} | {r['model']}{default} | {r['qssf_avg_jct_s']:,.0f} | "
            f"{r['qssf_over_oracle']:.3f} | {r['qssf_over_fifo']:.3f} | "
            f"{r['hint_updates']:,} | {'-' if mae is None else f'{mae:.3f}'} | "
            f"{r['seconds']:.1f} |"
        )
    print()
    for m, g in geo.items():
        print(f"geometric mean of QSSF / oracle over Philly and ITP 01-05, {m}: {g:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
