"""``gpuhint analyze --trace FILE``: a cluster from its job trace, as the Helios paper."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuhint.cli.common import UserError, add_trace_args, add_trace_file_arg, needs_trace

HELP = "characterize a cluster from its job trace: HTML report, figures, JSON"

DESCRIPTION = """\
Reads a job trace (Helios cluster_log.csv, Philly JSON, plain CSV, Slurm sacct
--parsable2 / --json exports: any format `gpuhint replay` reads; gzipped or not),
streaming it in chunks, and shows your
cluster the way the Helios paper (SC '21) shows its four: how long jobs run (overall
and by GPU count), how many GPUs they ask for (jobs and GPU time), how they end
(completed / cancelled / failed, by count and by GPU time), how long they queue, when
they are submitted (hour of day, day of week), how concentrated GPU time is among
users (top 1% / 5% / 10%), how repetitive each user's jobs are (the paper's history
rule: median error, share of jobs with an earlier job of the same user and size), and
a summary per virtual cluster. Sections the trace has no fields for (no users, no
states, no start times) are skipped with a note saying so.

Then "what gpuhint can do for this cluster": the QSSF simulation (FIFO vs QSSF with
gpuhint's online hints vs the oracle; the code of `gpuhint evaluate qssf`, VCs sized by
its rule: --vc-config, else to --target-load) on the trace, or its latest --qssf-jobs
jobs; the energy that powering idle nodes down would save on those jobs (Slurm's idle
timer at 1 h and gpuhint's policy, as `gpuhint evaluate ces --trace`; --no-ces skips
it); with --series the CES replay of a load series (`gpuhint evaluate ces`); and what
the trace lacks for the predictor and what it costs.

The report opens with warnings on gaps and oddities of the trace (submissions only in
part of the day, long pauses, clock jumps, duplicate ids, 0 s jobs) and an Actions box:
enable QSSF or not and with which GPUHINT_QSSF_WAIT_BOUND, power idle nodes down or not
and what it saves (--json: "actions", a list of {action, why, knob}; docs/analyze.md).

Writes into --out (default ./analyze-<trace name>/):
  report.html         one self-contained page: figures embedded, no network access
  analysis.json       every number behind the figures (keys in docs/analyze.md)
  *.png               each figure as a file
and prints a short summary (or, with --json, analysis.json) on stdout. Progress goes to
stderr: the stages, and every 5 s a line while one still runs (--no-progress: the stages
only).
"""

EPILOG = """\
examples:
  gpuhint analyze --trace cluster_log.csv                        # a Helios trace
  gpuhint analyze --trace philly_sampled_jobs.json -o philly/    # Philly
  gpuhint analyze --trace jobs.csv --series nodes.csv.gz         # plain CSV + CES on a load series
  gpuhint analyze --trace cluster_log.csv --vc-config vc_config.csv --qssf-jobs 50000
  gpuhint analyze --trace history.sacct                          # Slurm: sacct -a -X --parsable2
  gpuhint analyze --trace big.csv.gz --no-qssf --json | jq .helios_summary

bad input: the first bad row stops the run with file:line and the reason (exit 2);
--on-error skip skips bad rows and reports them.
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    from gpuhint.lab.analysis.whatif import QSSF_MAX_JOBS
    from models.registry import DEFAULT_MODEL, DURATION_MODELS

    p = sub.add_parser(
        "analyze",
        help=HELP,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_trace_file_arg(p, "job trace file (Helios, Philly, plain CSV, sacct)")
    add_trace_args(p)
    p.add_argument(
        "-o", "--out", metavar="DIR", help="output folder (default: ./analyze-<trace name>)"
    )
    p.add_argument(
        "--series",
        metavar="FILE",
        help="cluster load series for the CES summary (time,active,total or a Helios "
        "cluster_sequence; as `gpuhint evaluate ces --series`)",
    )
    p.add_argument(
        "--ces-test-days",
        type=int,
        default=7,
        metavar="N",
        help="CES: report over the series' last N days (default: 7)",
    )
    p.add_argument("--ces-test-from", metavar="DAY", help="CES: first test day, YYYY-MM-DD")
    p.add_argument("--ces-test-to", metavar="DAY", help="CES: last test day, YYYY-MM-DD")
    p.add_argument("--no-qssf", action="store_true", help="skip the QSSF simulation")
    p.add_argument(
        "--no-ces",
        action="store_true",
        help="skip the CES estimate from the trace's jobs (idle timer vs gpuhint's policy)",
    )
    p.add_argument(
        "--qssf-jobs",
        type=int,
        default=QSSF_MAX_JOBS,
        metavar="N",
        help=f"simulate QSSF on the latest N jobs of a larger trace (default: {QSSF_MAX_JOBS}; "
        "the simulation time grows with N)",
    )
    p.add_argument(
        "--model",
        choices=sorted(DURATION_MODELS),
        default=DEFAULT_MODEL,
        help=f"online duration model behind the QSSF hints (default: {DEFAULT_MODEL})",
    )
    p.add_argument("--vc-config", metavar="CSV", help="QSSF: nodes per VC (header, vc,nodes)")
    p.add_argument(
        "--target-load",
        type=float,
        default=0.9,
        metavar="U",
        help="QSSF: size VCs not in --vc-config to this offered load (default: 0.9)",
    )
    p.add_argument("--json", action="store_true", help="print analysis.json instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(handler=needs_trace(run))


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Steps:
    """Step lines on stderr and, unless ``quiet``, a line every ``every_s`` seconds while
    a step runs longer (the QSSF and CES simulations run for tens of seconds)."""

    def __init__(
        self,
        quiet: bool,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        out: Callable[[str], None] = _say,
    ) -> None:
        import threading

        self.every_s, self.clock, self.out = every_s, clock, out
        self._lock = threading.Lock()
        self._step = ""
        self._since = self._last = clock()
        self._stop = threading.Event()
        self._thread = None if quiet else threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Steps:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def say(self, msg: str) -> None:
        with self._lock:
            if not msg.startswith(" "):  # an indented line reports on the current step
                self._step, self._since = msg, self.clock()
            self._last = self.clock()
            self.out(msg)

    def tick(self) -> None:
        """Say that the current step still runs, if nothing was said for ``every_s``."""
        with self._lock:
            now = self.clock()
            if self._step and now - self._last >= self.every_s:
                self.out(f"  ... still {self._step} ({now - self._since:,.0f} s)")
                self._last = now

    def _run(self) -> None:
        while not self._stop.wait(min(0.5, self.every_s)):
            self.tick()


def _read(args: argparse.Namespace, tail: int) -> Any:
    from gpuhint.cli.common import _first_bad_utf8_line as first_bad_utf8_line
    from gpuhint.cli.common import left_out_line
    from gpuhint.lab.analysis.reader import read_frame
    from gpuhint.lab.traces.readers import TraceError

    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc="reading",
                disable=True if args.no_progress else None,
                file=sys.stderr,
                mininterval=0.5,
            )
        bar.update(done - bar.n)

    trace = Path(args.trace)
    if trace.exists() and not trace.is_file() and not trace.is_dir():
        raise UserError(
            f"{args.trace}: not a regular file (a device or a pipe): save the trace first"
        )
    try:
        frame = read_frame(
            args.trace, args.format, args.on_error, tail_jobs=tail, progress=progress
        )
    except TraceError as exc:
        hint = (
            ""
            if "unknown trace format" in exc.reason or args.on_error == "skip"
            else "\n  (use --on-error skip to skip bad rows and report them)"
        )
        raise UserError(f"{exc}{hint}") from None
    except FileNotFoundError:
        raise UserError(f"{args.trace}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{args.trace}: is a directory, not a trace file") from None
    except UnicodeDecodeError as exc:
        bad = first_bad_utf8_line(trace)
        where = f"{args.trace}:{bad}" if bad else args.trace
        raise UserError(f"{where}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{args.trace}: cannot read: {exc}") from None
    finally:
        if bar is not None:
            bar.close()
    for why, n in frame.left_out.items():
        _say(left_out_line(n, why))
    for err in frame.errors[:10]:
        _say(f"skipped {err}")
    if len(frame.errors) > 10:
        _say(f"... and {len(frame.errors) - 10} more bad rows skipped")
    if frame.rows == 0:
        raise UserError(f"{args.trace}: no usable jobs in the trace")
    _first_of_each_id(frame)
    return frame


def _first_of_each_id(frame: Any) -> None:
    """Keep the first job (in file order) of each id in the jobs the simulations run:
    the service's core takes a repeated id for a resend of the job and drops it."""
    seen: set[str] = set()
    keep = []
    for job in sorted(frame.tail, key=lambda j: j.line):
        if job.job_id not in seen:
            seen.add(job.job_id)
            keep.append(job)
    if len(keep) < len(frame.tail):
        _say(
            f"QSSF and CES simulations: left out {len(frame.tail) - len(keep):,} jobs whose id "
            "repeats an earlier job's (the service would drop them as resends)"
        )
        frame.tail = sorted(keep, key=lambda j: (j.submit_time, j.line))


def run(args: argparse.Namespace) -> int:
    from gpuhint.lab.analysis import report
    from gpuhint.lab.evaluation.ces import parse_day
    from gpuhint.lab.evaluation.qssf import InputError, read_vc_config
    from gpuhint.lab.traces.loadseries import SeriesError

    if not 0 < args.target_load <= 1:
        raise UserError(f"--target-load must be in (0, 1], got {args.target_load}")
    if args.qssf_jobs < 1:
        raise UserError("--qssf-jobs must be >= 1")
    if args.ces_test_days < 1:
        raise UserError("--ces-test-days must be >= 1")
    if (args.ces_test_from or args.ces_test_to) and not args.series:
        raise UserError("--ces-test-from / --ces-test-to need --series")
    for flag, day in (("--ces-test-from", args.ces_test_from), ("--ces-test-to", args.ces_test_to)):
        if day:
            try:
                parse_day(day)
            except ValueError as exc:
                raise UserError(f"{flag}: {exc}") from None
    if args.series and not Path(args.series).is_file():
        raise UserError(f"{args.series}: no such file (--series)")
    try:
        vc_nodes = read_vc_config(args.vc_config) if args.vc_config else None
    except InputError as exc:
        raise UserError(str(exc)) from None
    out_dir = Path(args.out or f"analyze-{_trace_stem(args.trace)}")
    t0 = time.perf_counter()
    _say(f"reading {args.trace}")
    frame = _read(args, 0 if args.no_qssf and args.no_ces else args.qssf_jobs)
    _say(f"  {frame.rows:,} jobs ({frame.fmt}) in {frame.seconds:.1f} s")
    opts = report.Options(
        out_dir=out_dir,
        model=args.model,
        qssf=not args.no_qssf,
        qssf_max_jobs=args.qssf_jobs,
        vc_nodes=vc_nodes,
        target_load=args.target_load,
        series=Path(args.series) if args.series else None,
        ces_test_days=args.ces_test_days,
        ces_test_from=args.ces_test_from,
        ces_test_to=args.ces_test_to,
        progress=False if args.no_progress else None,
        ces_jobs=not args.no_ces,
    )
    try:
        with Steps(quiet=args.no_progress) as steps:
            numbers = report.analyze(frame, opts, say=steps.say)
    except SeriesError as exc:
        raise UserError(f"{exc} (--series)") from None
    except ValueError as exc:  # e.g. a CES test window outside the series
        raise UserError(str(exc).replace("--test-", "--ces-test-")) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a truncated or corrupt gzip
        raise UserError(f"{args.series}: cannot read: {exc} (--series)") from None
    except OSError as exc:
        raise UserError(f"cannot write into {out_dir}: {exc}") from None
    try:
        report.write_json(numbers, out_dir / "analysis.json")
        (out_dir / "report.html").write_text(report.render_html(numbers, out_dir), "utf-8")
    except OSError as exc:
        raise UserError(f"cannot write into {out_dir}: {exc}") from None
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps(numbers, indent=2))
        return 0
    print(summary_text(numbers, out_dir, elapsed))
    return 0


def _trace_stem(trace: str) -> str:
    """The trace's name without its extension(s), for the default folder.

    >>> [_trace_stem(t) for t in ("a/venus.csv", "big.csv.gz", "jobs.2021.csv", "log")]
    ['venus', 'big', 'jobs.2021', 'log']
    """
    p = Path(trace)
    if p.suffix.lower() in (".gz", ".gzip"):
        p = Path(p.stem)
    return p.stem or p.name


def _p(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f} s"


def sizing_words(vc_sizing: dict[str, str]) -> str:
    """How the VCs of a simulation were sized, in words (``sized to load 0.9``, ``given``).

    >>> sizing_words({"a": "given", "b": "sized to load 0.9"})
    'given by --vc-config / sized to load 0.9, models/simulator/sizing.py'
    """
    kinds = sorted(set(vc_sizing.values()))
    words = [("given by --vc-config" if k == "given" else k) for k in kinds]
    return " / ".join(words) + (
        ", models/simulator/sizing.py" if any(k != "given" for k in kinds) else ""
    )


def summary_text(n: dict[str, Any], out_dir: Path, elapsed: float) -> str:
    """The short terminal summary of an analysis."""

    o, h, d = n["overview"], n["helios_summary"], n["duration"]
    lines = [
        f"{n['trace']} ({n['format']}): {o['jobs']:,} jobs, {o['gpu_jobs']:,} GPU jobs, "
        f"{o['users']:,} users, {o['vcs']:,} VCs, {o['span_days']:.1f} days, "
        f"{o['gpu_hours']:,.0f} GPU hours",
        f"  GPU job duration   median {_s(h['med_run_time_gpu'])}, mean "
        f"{_s(h['avg_run_time_gpu'])}; {_p(d['gpu_jobs_under_1h_share'])} run under 1 h and "
        f"use {_p(d['gpu_time_of_jobs_under_1h_share'])} of GPU time",
    ]
    if n["states"]:
        g = n["states"]["gpu"]
        lines.append(
            f"  GPU job states     completed {_p(g['by_count']['completed'])}, cancelled "
            f"{_p(g['by_count']['cancelled'])}, failed {_p(g['by_count']['failed'])} (by GPU "
            f"time: {_p(g['by_gpu_time']['completed'])} / {_p(g['by_gpu_time']['cancelled'])} / "
            f"{_p(g['by_gpu_time']['failed'])})"
        )
    if n["queue"]:
        q = n["queue"]["gpu"]
        lines.append(
            f"  GPU job queueing   median {_s(q['median_s'])}, mean {_s(q['mean_s'])}, "
            f"{_p(q['zero_share'])} start at once"
        )
    if n["users"]:
        t = n["users"]["top"]
        lines.append(
            f"  users              top 1% / 5% / 10% use {_p(t['top_1pct']['gpu_time_share'])} / "
            f"{_p(t['top_5pct']['gpu_time_share'])} / {_p(t['top_10pct']['gpu_time_share'])} "
            "of GPU time"
        )
    if n["repetition"]:
        r = n["repetition"]
        lines.append(
            f"  repetition         {_p(r['same_user_same_gpus_prior_share'])} of jobs follow "
            f"one of the same user and GPUs; history rule median error {_p(r['median_ape'])}"
        )
    s = n["submissions"]
    lines.append(
        f"  submissions        busiest hour {s['peak_hour']:02d}:00, quietest "
        f"{s['quietest_hour']:02d}:00 ({s['clock']})"
    )
    lines += _gpuhint_lines(n["gpuhint"])
    if n["skipped"]:
        lines.append(
            "  skipped            " + "; ".join(f"{k}: {v}" for k, v in n["skipped"].items())
        )
    for c in n.get("trace_checks") or []:
        lines.append(f"  {c['severity']}: {c['message']}")
    lines.append("actions:")
    for k, a in enumerate(n.get("actions") or [], 1):
        lines.append(f"  {k}. {a['action']}")
        lines.append(f"     why:  {a['why']}")
        lines.append(f"     knob: {a['knob']}")
    lines.append(f"report: {(out_dir / 'report.html').resolve()}  ({elapsed:.1f} s)")
    return "\n".join(lines)


def _gpuhint_lines(g: dict[str, Any]) -> list[str]:
    """The summary's lines on what gpuhint would do: QSSF and the two CES estimates."""
    from gpuhint.lab.analysis.html_parts import vs_fifo

    lines: list[str] = []
    if g["qssf"]:
        q = g["qssf"]
        fq, qo = q["jct_ratio_fifo_over_qssf"], q["jct_ratio_qssf_over_oracle"]
        lines.append(
            f"  QSSF ({q['window']})  avg JCT FIFO {_s(q['avg_jct_s']['fifo'])}, QSSF "
            f"{_s(q['avg_jct_s']['qssf'])}, oracle {_s(q['avg_jct_s']['qssf-oracle'])}: "
            f"{vs_fifo(fq)}, {'-' if qo is None else f'{qo:.2f}x'} the oracle "
            f"(VCs {sizing_words(q['vc_sizing'])})"
        )
        wu = q.get("without_users")
        if wu and wu["jct_ratio_qssf_over_oracle"]:
            lines.append(
                f"  QSSF, hints blind to users and names: {wu['jct_ratio_qssf_over_oracle']:.2f}x "
                "the oracle"
            )
    else:
        lines.append(f"  QSSF               {g['qssf_note']}")
    if g["ces"]:
        c = g["ces"]
        lines.append(
            f"  CES ({c['series']})  utilization {_p(c['util_before'])} -> "
            f"{_p(c['util_after'])}, {c['shortfall_node_slots']} shortfall node-slots"
        )
    cj = g.get("ces_jobs")
    if cj:
        t, gh = cj["idle_timer"], cj["gpuhint"]
        lines.append(
            f"  CES (the jobs, {cj['nodes']} nodes)  SuspendTime=1 h saves "
            f"{t['energy_saved_kwh']:,.0f} kWh, +{_s(t['added_wait_avg_s'])} average wait; "
            f"gpuhint's policy {gh['energy_saved_kwh']:,.0f} kWh, +{_s(gh['added_wait_avg_s'])}"
        )
    return lines
