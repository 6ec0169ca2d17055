"""Throughput of every duration model: predict at submit + learn at finish, one core.

Replays a job trace (default: the Venus excerpt shipped in ``gpuhint/data``), repeated
``--repeat`` times with fresh job ids and shifted times, through each model of
:data:`models.registry.DURATION_MODELS` directly (no engine, no store), and reports
jobs per second (one job = one ``predict`` + one ``learn``) and the ratio to the
fastest model. ``--write`` replaces the "Duration models" section of
docs/benchmarks.md with the table, the command, the machine and the date.

Usage::

    python bench/bench_models.py [--trace FILE] [--repeat 5] [--models a,b] [--write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sys
import time
from importlib import resources
from pathlib import Path

from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent, JobPhase
from models.registry import DEFAULT_MODEL, DURATION_MODELS, make_model

SECTION = "## Duration models"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def stream(trace: Path, repeat: int) -> list[JobEvent]:
    """Submitted and finished events of the trace, ``repeat`` times back to back."""
    jobs = read_trace(trace).jobs
    base = [e for e in job_events(jobs) if e.phase is not JobPhase.STARTED]
    span = max(e.time for e in base) - min(e.time for e in base) + 1.0
    out: list[JobEvent] = []
    for r in range(repeat):
        shift = r * span
        for e in base:
            upd: dict[str, object] = {
                "job_id": f"{e.job_id}#{r}",
                "time": e.time + shift,
                "submit_time": e.submit_time + shift,
            }
            if e.start_time is not None:
                upd["start_time"] = e.start_time + shift
            out.append(e.model_copy(update=upd))
    return out


def bench(name: str, events: list[JobEvent]) -> tuple[float, float]:
    """(jobs/s, seconds) for predict + learn of every job in the stream."""
    model = make_model(name)
    predict, learn = model.predict, model.learn
    t0 = time.perf_counter()
    jobs = 0
    for e in events:
        if e.phase is JobPhase.SUBMITTED:
            predict(e)
        elif e.duration_s is not None:
            learn(e, e.duration_s)
            jobs += 1
    wall = time.perf_counter() - t0
    return jobs / wall, wall


def write_section(text: str) -> None:
    old = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    pat = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pat.sub(lambda _: text, old) if pat.search(old) else old.rstrip("\n") + "\n\n" + text
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None, help="default: the shipped excerpt")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(DURATION_MODELS))
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.trace is None:
        trace = Path(str(resources.files("gpuhint") / "data" / "venus_sept_2vc.csv"))
    else:
        trace = args.trace
    events = stream(trace, args.repeat)
    n_jobs = sum(1 for e in events if e.phase is JobPhase.FINISHED)
    names = [m for m in args.models.split(",") if m]
    results = {m: bench(m, events) for m in names}
    top = max(r[0] for r in results.values())
    lines = [
        "| model | jobs/s (predict + learn) | ratio to fastest | seconds |",
        "|---|---:|---:|---:|",
    ]
    for m, (rate, wall) in results.items():
        mark = " (default)" if m == DEFAULT_MODEL else ""
        lines.append(f"| {m}{mark} | {rate:,.0f} | {rate / top:.3f} | {wall:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        cmd = "python bench/bench_models.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = (
            f"{SECTION}\n\n"
            f"Predict at submit + learn at finish, each model on its own, one core, "
            f"{n_jobs:,} jobs ({trace.name} x {args.repeat}, fresh job ids each pass).\n"
            f"Command: `{cmd.strip()}`. Machine: {platform.machine()}, "
            f"{os.cpu_count()} cores, Python "
            f"{platform.python_version()}; {dt.date.today().isoformat()}.\n\n"
            f"{table}\n\n"
        )
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
