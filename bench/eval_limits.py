"""gpuhint against the policies a Slurm site runs on its users' time limits, on a real
trace given *synthetic* limits (no shared trace carries requested limits).

Issue 23 item 7 asks that gpuhint's hints beat ranking by GPUs x requested limit, and
that QSSF be compared with FIFO + EASY backfill on the users' limits. Without real
limits this draws them from one of three user models, seeded, so that what the
comparison depends on is visible:

* ``rounded``: careful users. Each job asks for the smallest of a site's usual values
  (:data:`ROUND_S`: 15 min .. 7 days) at or above its own duration. The most a
  limit-based policy can get from limits of that resolution.
* ``noisy``: each job asks for its duration x u, u log-uniform in [1, 10], rounded up
  to a usual value, and one job in five asks for the partition's maximum (7 days).
  Users' estimates are modal, mostly round values, often the maximum, and typically far
  above the run time (Tsafrir, Etsion & Feitelson, "Modeling user runtime estimates",
  JSSPP 2005; Mu'alem & Feitelson, IEEE TPDS 2001): this is a rough stand-in, not
  their model.
* ``habitual``: each user asks for one value for all their jobs, the usual value at
  or above 1.5x their longest job (users reuse their script's limit).

A job never runs past its limit here (the trace's durations are real): a limit below
the duration is raised to it, and a value past the 7-day maximum is rounded up to whole
days. On traces without users (ITP) ``habitual`` gives every job one value, from the
whole trace's longest job. Everything else is ``gpuhint evaluate qssf`` (closed loop, default model,
VCs at load 0.9 or ``--vc-config``): with limits it adds ``sjf-limit``, ``fifo+easy``
and ``qssf+easy-limit`` (gpuhint's order, EASY on the users' limits: what a Slurm site
runs with gpuhint's priorities and its own backfill). It also sets gpuhint's expected
starts beside ``squeue --start``'s estimate from the limits, on the jobs both named.

    python bench/eval_limits.py TRACE [--limits noisy] [--vc-config CSV] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import random
import sys
from collections.abc import Sequence
from datetime import date

from gpuhint.lab.evaluation.qssf import evaluate_qssf, read_vc_config
from gpuhint.lab.traces.readers import read_trace
from gpuhint.lab.traces.records import TraceJob

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0
ROUND_S: tuple[float, ...] = (
    15 * MIN, 30 * MIN, HOUR, 2 * HOUR, 4 * HOUR, 8 * HOUR, 12 * HOUR,
    DAY, 2 * DAY, 3 * DAY, 5 * DAY, 7 * DAY,
)  # fmt: skip
"""A site's usual limit values (s); the last is the partition's maximum."""

WIDTHS = (-17, 13, 14, 14, 10)
"""The table's column widths (negative: left-aligned)."""

POLICIES = ("fifo", "fifo+easy", "sjf-limit", "qssf", "qssf+easy", "qssf+easy-limit")


def round_up(x: float) -> float:
    """The smallest usual value at or above ``x``; past the maximum, whole days.

    >>> round_up(100.0), round_up(7200.0), round_up(10 * DAY + 1)
    (900.0, 7200.0, 950400.0)
    """
    for v in ROUND_S:
        if v >= x:
            return v
    return math.ceil(x / DAY) * DAY


def with_limits(jobs: Sequence[TraceJob], model: str, seed: int = 0) -> list[TraceJob]:
    """``jobs`` with a ``time_limit_s`` drawn from the user model ``model``."""
    rng = random.Random(seed)
    longest: dict[str | None, float] = {}
    for j in jobs:
        longest[j.user] = max(longest.get(j.user, 0.0), j.duration)
    out = []
    for j in jobs:
        if model == "rounded":
            lim = round_up(j.duration)
        elif model == "noisy":
            u = math.exp(rng.uniform(0.0, math.log(10.0)))
            lim = ROUND_S[-1] if rng.random() < 0.2 else round_up(j.duration * u)
        elif model == "habitual":
            lim = round_up(1.5 * longest[j.user])
        else:
            raise ValueError(f"unknown limit model {model!r}")
        out.append(dataclasses.replace(j, time_limit_s=max(lim, round_up(j.duration))))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--limits", choices=("rounded", "noisy", "habitual"), default="noisy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vc-config", default=None)
    ap.add_argument("--model", default="history_mix")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    a = ap.parse_args(argv)
    jobs = with_limits(read_trace(a.trace).jobs, a.limits, a.seed)
    nodes = read_vc_config(a.vc_config) if a.vc_config else None
    rep = evaluate_qssf(jobs, model=a.model, vc_nodes=nodes).as_dict()
    pol = {p: rep["policies"][p] for p in POLICIES if p in rep["policies"]}
    keys = ("avg_jct_s", "p99_wait_s", "max_wait_s", "share_jct_over_2x_fifo")
    rows = {p: {k: pol[p].get(k) for k in keys} for p in pol}
    meta = {"trace": a.trace, "limits": a.limits, "seed": a.seed, "model": a.model}
    meta |= {"machine": platform.machine(), "date": str(date.today())}
    starts = rep.get("expected_start")
    if a.json:
        print(json.dumps({**meta, "policies": rows, "expected_start": starts}, indent=1))
        return 0
    print(" ".join(f"{k}={v}" for k, v in meta.items()))
    head = ("policy", "avg JCT (s)", "p99 wait (h)", "max wait (h)", ">2x FIFO")
    cells = zip(head, WIDTHS, strict=True)
    print("".join(f"{h:>{w}}" if w > 0 else f"{h:<{-w}}" for h, w in cells))
    for p, r in rows.items():
        print(
            f"{p:<17}{r['avg_jct_s']:>13,.0f}{r['p99_wait_s'] / HOUR:>14,.1f}"
            f"{r['max_wait_s'] / HOUR:>14,.1f}{r['share_jct_over_2x_fifo']:>10.1%}"
        )
    if starts and starts.get("limit_jobs"):
        print(
            f"expected start, median |error| / wait over {starts['limit_jobs']} jobs: "
            f"gpuhint {starts['median_rel_error_limit_jobs']:.2f}, "
            f"from the limits (squeue --start) {starts['limit_median_rel_error']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
