"""``gpuhint demo``: the whole QSSF hint core in one process, on a real trace excerpt."""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from gpuhint.cli.common import (
    UserError,
    add_trace_args,
    json_text,
    load_trace,
    name_arg,
    report_skipped,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpuhint.cores.qssf import EngineStats, HintEngine
    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.lab.traces.records import TraceRead
    from gpuhint.wire.contract import JobEvent, PriorityHint

HELP = "replay a real trace through the hint core in-process (no Kafka, no Redis)"
DESCRIPTION = """\
Replays a job trace through the same core the streaming worker runs: every submitted
job gets a QSSF priority hint (expected GPU-seconds) in an in-process store, started
and finished jobs lose theirs, and the model learns from every finished job.

By default it uses the shipped excerpt of the SenseTime Helios Venus trace
(1,867 real jobs, CC-BY-4.0); --trace philly uses the shipped Philly excerpt (418 real
jobs with their real start times, so queues form); see gpuhint/data/ATTRIBUTION.md.
--trace FILE replays any Helios, Philly or plain CSV trace.

It closes with what the hints are worth on the replayed trace: the trace's GPU jobs
scheduled in the simulator of `gpuhint evaluate qssf` by FIFO, by QSSF with gpuhint's
hints (closed loop: the model learns and re-ranks waiting jobs in that schedule) and by
the QSSF oracle, and the head of that schedule's queue at the point where the replay
stopped. VCs are sized by the rule `gpuhint evaluate qssf` and `gpuhint analyze` use:
the nodes --vc-config gives, else enough 8-GPU nodes for the VC's GPU time to fill them
at the offered load --target-load (0.9; models/simulator/sizing.py). So the three
commands give the same "better than FIFO" figure for the same trace and flags; the
Helios artifact's real Venus sizes (20 and 2 nodes) give a busier cluster and a larger
gain: --vc-config venus_vc_config.csv (in the shared Helios traces).

examples:
  gpuhint demo                                  # the shipped Venus excerpt
  gpuhint demo --trace philly                   # the shipped Philly excerpt: queues form
  gpuhint demo --trace jobs.csv --vc-config vcs.csv --json   # your trace, your VC sizes
"""


SHIPPED = {"venus": "venus_sept_2vc.csv", "philly": "philly_excerpt.json"}


def shipped_trace(name: str = "venus") -> Path:
    """Path of a trace excerpt shipped in the package (see gpuhint/data/ATTRIBUTION.md)."""
    return Path(str(resources.files("gpuhint") / "data" / SHIPPED[name]))


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    from models.registry import DEFAULT_MODEL, DURATION_MODELS

    p = sub.add_parser(
        "demo",
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trace",
        metavar="FILE|venus|philly",
        default="venus",
        help="trace file, or a shipped excerpt: venus (default) or philly",
    )
    add_trace_args(p)
    p.add_argument(
        "--model", choices=sorted(DURATION_MODELS), default=DEFAULT_MODEL, help="duration model"
    )
    p.add_argument(
        "--vc-config", metavar="CSV", help="schedule: nodes per VC (header, then rows vc,nodes)"
    )
    p.add_argument(
        "--target-load",
        type=float,
        default=0.9,
        metavar="U",
        help="schedule: size VCs not in --vc-config to this offered load (default: 0.9)",
    )
    p.add_argument(
        "--cluster", default="demo", type=name_arg, help="cluster name on events (default: demo)"
    )
    p.add_argument("--top", type=int, default=5, help="queue head to show per VC (default: 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from functools import partial

    from gpuhint.cores.qssf import HintEngine
    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.lab.evaluation.qssf import InputError, read_vc_config, schedule_summary
    from gpuhint.lab.traces.readers import job_events
    from models.registry import make_model

    if not 0 < args.target_load <= 1:
        raise UserError(f"--target-load must be in (0, 1], got {args.target_load}")
    try:
        vc_nodes = read_vc_config(args.vc_config) if args.vc_config else None
    except InputError as exc:
        raise UserError(str(exc)) from None
    trace = shipped_trace(args.trace) if args.trace in SHIPPED else Path(args.trace)
    read = load_trace(trace, args.format, args.on_error)
    report_skipped(read)
    events = job_events(read.jobs, cluster=args.cluster)
    if args.top < 0:
        raise UserError("--top must be >= 0")

    store = InMemoryStore()
    engine = HintEngine(partial(make_model, args.model), store, clock=lambda: 0.0)
    # Leave the last day's jobs pending: cut the replay where the last 5% of submits begin,
    # so the store ends holding a real queue, as a live cluster would.
    cut = read.jobs[int(len(read.jobs) * 0.95)].submit_time
    n, elapsed = _replay(events, cut, engine, store, args, trace)
    if not (args.no_progress or args.json):
        print("scheduling the GPU jobs: FIFO, QSSF with the hints, the oracle", file=sys.stderr)
    try:
        sched = schedule_summary(
            read.jobs,
            args.model,
            snapshot_at=cut,
            target_load=args.target_load,
            vc_nodes=vc_nodes,
        )
    except InputError:
        sched = None  # no GPU jobs: nothing to schedule
    sizing = (
        {
            vc: "given" if vc_nodes and vc in vc_nodes else f"sized to load {args.target_load:g}"
            for vc in sched.vc_sizes
        }
        if sched is not None
        else {}
    )
    s = engine.stats
    queues = {vc: q for (c, vc), q in sorted(store.queues.items()) if q}
    result = {
        "trace": str(trace),
        "format": read.fmt,
        "model": args.model,
        "jobs": len(read.jobs),
        "rows_skipped": len(read.errors),
        "events_replayed": n,
        "hints_written": s.hints_written,
        "hints_removed": s.hints_removed,
        "hints_pending": len(store.hints),
        "learned": s.learned,
        "mae_log": s.mae_log,
        "median_abs_pct_error": s.median_abs_pct_error,
        "events_per_s": n / elapsed if elapsed > 0 else None,
        "elapsed_s": elapsed,
        "schedule": (
            {**sched.as_dict(), "vc_sizing": sizing, "target_load": args.target_load}
            if sched is not None
            else None
        ),
    }
    if args.json:
        sys.stdout.write(json_text(result, indent=2))
        print()
        return 0
    _print_replay(trace, read, args, s, n, elapsed, store, queues)
    if sched is not None:
        _print_schedule(sched, args.top, sizing)
    return 0


def _replay(
    events: Iterable[JobEvent],
    cut: float,
    engine: HintEngine,
    store: InMemoryStore,
    args: argparse.Namespace,
    trace: Path,
) -> tuple[int, float]:
    """Feed the events up to ``cut`` through the worker's own message path; the number
    replayed and the seconds it took."""
    from tqdm import tqdm

    from gpuhint.cores.pipeline.handler import Message, MessageHandler
    from gpuhint.wire.contract import encode_message
    from gpuhint.wire.topics import job_key

    t0 = time.perf_counter()
    n = 0
    bar = tqdm(
        events, unit="ev", desc="replaying", disable=args.no_progress or args.json, leave=False
    )
    # the worker's own message path: each event as the bytes a producer would send
    handler = MessageHandler(engine)
    topic = handler.topics.job_events
    for ev in bar:
        if ev.time > cut:
            break
        key = job_key(ev.cluster, ev.vc)
        out = handler.job_event(Message(topic, 0, n, key, encode_message(ev)))
        if out.reason is not None:
            raise UserError(f"event {n} of {trace}: {out.reason}")
        n += 1
        if n % 1000 == 0:
            store.flush()
    bar.close()
    store.flush()
    return n, time.perf_counter() - t0


def _print_replay(
    trace: Path,
    read: TraceRead,
    args: argparse.Namespace,
    s: EngineStats,
    n: int,
    elapsed: float,
    store: InMemoryStore,
    queues: dict[str, dict[str, float]],
) -> None:
    """The replay in words: counts, prediction error, throughput and each VC's queue head."""
    print(f"trace            {trace.name} ({read.fmt}, {len(read.jobs):,} jobs)")
    print(f"model            {args.model}")
    print(
        f"events replayed  {n:,} (submitted {s.submitted:,}, started {s.started:,}, "
        f"finished {s.finished:,})"
    )
    print(
        f"hints            {s.hints_written:,} written, {len(store.hints):,} pending now "
        "(the others removed when their jobs started)"
    )
    if s.mae_log is not None:
        print(
            f"prediction error MAE(log duration) {s.mae_log:.3f}, median |error| "
            f"{100 * (s.median_abs_pct_error or 0):.0f}% over {s.scored:,} finished jobs"
        )
    print(f"throughput       {n / elapsed:,.0f} events/s, {elapsed:.2f} s")
    if not queues:
        no_starts = all(j.start_time is None for j in read.jobs)
        print(
            "queues           empty at the end of the replay"
            + (
                " (this trace records no start times, so each job is taken to start when "
                "submitted; try --trace philly)"
                if no_starts
                else ""
            )
        )
    for vc, q in queues.items():
        head = sorted(q.items(), key=lambda kv: (kv[1], kv[0]))[: args.top]
        print(f"queue {vc}: {len(q)} pending; run first:")
        _print_jobs([(j, store.hints[(args.cluster, j)]) for j, _ in head])


def _print_jobs(rows: list[tuple[str, PriorityHint]]) -> None:
    """A queue head, one job a line, each hint's fields describing one estimate (as
    ``gpuhint hints``): its expected service (GPUs x the mean run, what it ranks by), the
    typical run (the point forecast) with the 80% band of runs, and why it ranks out of
    that order if it does. With heavy tails (many runs fail fast, a few run for hours)
    the mean can lie above the band (docs/qssf.md, "Hints that agree with themselves")."""
    from gpuhint.cli.common import human_duration, human_gpu_time
    from gpuhint.lab.evaluation.qssf_online import expected_at_submit

    width = max((len(r[0]) for r in rows), default=0)
    for job_id, h in rows:
        mean = expected_at_submit(h)
        lo, hi = h.duration_p10_s, h.duration_p90_s
        band = (
            "" if lo is None or hi is None else f", 80%: {human_duration(lo)}-{human_duration(hi)}"
        )
        print(
            f"    job {job_id:>{width}}  {h.num_gpus:>3} GPUs  expected service "
            f"{human_gpu_time(max(h.num_gpus, 1) * mean):>12} (mean run {human_duration(mean)}; "
            f"typical ~{human_duration(h.predicted_duration_s)}{band}){_override(h)}"
        )


def _override(h: PriorityHint) -> str:
    """Why a hint ranks out of its expected service's order, if it does."""
    from gpuhint.wire.contract import ARRIVAL_ORDER_REASON

    first = h.reasons[0].feature if h.reasons else ""
    if first == "wait_bound:overdue":
        return "  [first: waited past its limit]"
    if first == ARRIVAL_ORDER_REASON:
        return "  [arrival order: hints ranked worse than FIFO here]"
    return ""


def _print_schedule(sched: object, top: int, sizing: dict[str, str]) -> None:
    from gpuhint.cli.analyze import sizing_words
    from gpuhint.lab.analysis.html_parts import vs_fifo
    from gpuhint.lab.evaluation.qssf import ScheduleSummary

    assert isinstance(sched, ScheduleSummary)
    sizes = ", ".join(f"{vc} {n}" for vc, n in sched.vc_sizes.items())
    f, q, o = sched.fifo_avg_jct_s, sched.qssf_avg_jct_s, sched.oracle_avg_jct_s
    print(
        f"schedule         this trace's GPU jobs simulated (8-GPU nodes: {sizes}; "
        f"{sizing_words(sizing)}):"
    )
    print(
        f"  average JCT    FIFO {f:,.0f} s | QSSF with gpuhint hints {q:,.0f} s "
        f"({vs_fifo(f / q if q else None)}, {_times(q, o)} the oracle) | QSSF oracle {o:,.0f} s"
    )
    for vc, waiting in sched.queues.items():
        if not waiting:
            continue
        t = sched.queue_times[vc]
        ago = (sched.snapshot_at - t) / 3600
        when = (
            "where the replay stopped" if ago < 0.01 else f"{ago:,.1f} h before the replay stopped"
        )
        print(f"  queue {vc} {when}: {len(waiting)} waiting; run first:")
        _print_jobs([(w.job_id, w.hint) for w in waiting[:top] if w.hint is not None])


def _times(num: float, den: float) -> str:
    """``1.23x``, or ``-`` where every job ran 0 s."""
    return f"{num / den:.2f}x" if den > 0 else "-"
