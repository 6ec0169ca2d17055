"""Assemble a trace characterization: numbers, figure files, the JSON and the HTML report.

:func:`analyze` computes every section the trace has the fields for and writes its
figures into the output folder; :func:`render_html` turns the numbers into one
self-contained HTML page (figures embedded as ``data:`` PNGs, inline CSS, no script, no
external reference). The JSON keys are documented in ``docs/analyze.md``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuhint.lab.analysis import actions, checks, figures, repetition, stats, whatif
from gpuhint.lab.analysis.reader import TraceFrame
from gpuhint.lab.analysis.render import SECTIONS, findings, render_html
from gpuhint.lab.json_out import finite

SCHEMA_VERSION = 1

__all__ = ["SECTIONS", "Options", "analyze", "findings", "finite", "render_html", "write_json"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What to run besides the characterization itself."""

    out_dir: Path
    model: str = "history_mix"
    qssf: bool = True
    qssf_max_jobs: int = whatif.QSSF_MAX_JOBS
    vc_nodes: Mapping[str, int] | None = None
    target_load: float = 0.9
    series: Path | None = None
    ces_test_days: int = 7
    ces_test_from: str | None = None
    ces_test_to: str | None = None
    progress: bool | None = None
    ces_jobs: bool = True


FIGURE_FILES = frozenset(
    f"{name}.png"
    for name in (
        "duration_cdf",
        "gpu_demand",
        "final_states",
        "queue_cdf",
        "submissions",
        "user_concentration",
        "repetition",
        "vcs",
        "time_limits",
        "qssf_jct_cdf",
        "ces_load",
    )
)
"""Every figure ``analyze`` may write (docs/analyze.md); those a run does not draw are
removed from its folder, so none of an earlier run's passes for this one's."""


def analyze(frame: TraceFrame, opts: Options, say: Say | None = None) -> dict[str, Any]:
    """Every section's numbers; figures are written to ``opts.out_dir``."""
    log = say or (lambda _m: None)
    out_dir = opts.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    df = frame.jobs
    t0 = time.perf_counter()
    log(f"statistics and trace checks on {frame.rows:,} jobs")
    f = stats.fields_present(df)
    skipped: dict[str, str] = {}
    secs: dict[str, float] = {"read": round(frame.seconds, 3)}
    n: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "trace": frame.path,
        "format": frame.fmt,
        "rows": frame.rows,
        "rows_skipped": len(frame.errors),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "fields": f,
        "overview": stats.overview(df),
        "helios_summary": stats.helios_summary(df, f["state"], f["start_time"]),
    }
    n["trace_checks"] = _trace_checks(df, f["absolute_time"], f["start_time"])
    per_user_ape = _section_numbers(df, f, n, skipped)
    secs["stats"] = round(time.perf_counter() - t0, 3)

    log("drawing figures")
    t1 = time.perf_counter()
    figs = _draw_figures(df, n, per_user_ape, out_dir)
    secs["figures"] = round(time.perf_counter() - t1, 3)

    g: dict[str, Any] = {"qssf": None, "qssf_note": None, "ces": None, "ces_note": None}
    t2 = time.perf_counter()
    _qssf_whatif(frame, f, opts, g, figs, log)
    secs["qssf"] = round(time.perf_counter() - t2, 3)
    t3 = time.perf_counter()
    _ces_whatif(opts, g, figs, log)
    secs["ces"] = round(time.perf_counter() - t3, 3)
    t4 = time.perf_counter()
    _ces_jobs_whatif(frame, f, opts, g, log)
    secs["ces_jobs"] = round(time.perf_counter() - t4, 3)
    g["notes"] = whatif.predictor_notes(f, n["repetition"], g["qssf"])
    n["gpuhint"] = g
    n["actions"] = actions.actions(n)
    n["skipped"] = skipped
    n["figures"] = figs
    for stale in FIGURE_FILES - set(figs.values()):  # an earlier run's, into this folder
        (out_dir / stale).unlink(missing_ok=True)
    secs["total"] = round(frame.seconds + time.perf_counter() - t0, 3)
    n["seconds"] = secs
    return finite(n)


def _section_numbers(
    df: Any, f: Mapping[str, bool], n: dict[str, Any], skipped: dict[str, str]
) -> Any:
    """Fill ``n`` with each section the fields allow (``None`` and a reason in ``skipped``
    otherwise); returns the per-user median errors the repetition figure draws."""

    def need(section: str, ok: bool, why: str) -> bool:
        if not ok:
            skipped[section] = why
        return ok

    per_user_ape: Any = None
    n["duration"] = stats.duration_stats(df)
    n["gpu_demand"] = (
        stats.demand_stats(df) if need("gpu_demand", f["gpus"], "no job asks for a GPU") else None
    )
    n["states"] = (
        stats.state_stats(df)
        if need("states", f["state"], "the trace has no final states (every job COMPLETED)")
        else None
    )
    n["queue"] = (
        stats.queue_stats(df)
        if need("queue", f["start_time"], "the trace has no start times")
        else None
    )
    n["submissions"] = stats.submission_stats(df, f["absolute_time"])
    has_users = need("users", f["user"], "the trace has no users")
    n["users"] = stats.user_stats(df) if has_users else None
    if has_users:
        hist = repetition.history_rule(df)
        n["repetition"] = repetition.repetition_stats(df, hist)
        per_user_ape = repetition.per_user_median_ape(df, hist)
    else:
        skipped["repetition"] = "the trace has no users"
        n["repetition"] = None
    n["vcs"] = (
        stats.vc_stats(df, f["state"], f["start_time"])
        if need("vcs", f["vc"], "the trace has no virtual clusters (one 'default' VC)")
        else None
    )
    n["time_limits"] = (
        stats.time_limit_stats(df)
        if need("time_limits", f["time_limit"], "the trace has no requested time limits")
        else None
    )
    return per_user_ape


def _draw_figures(
    df: Any, n: Mapping[str, Any], per_user_ape: Any, out_dir: Path
) -> dict[str, str]:
    """Draw the figure of every section that has numbers; file names by section."""
    figs: dict[str, str] = {}
    figs["duration"] = figures.duration_cdf(df, out_dir / "duration_cdf.png").name
    if n["gpu_demand"]:
        figs["gpu_demand"] = figures.gpu_demand(n["gpu_demand"], out_dir / "gpu_demand.png").name
    if n["states"]:
        figs["states"] = figures.final_states(n["states"], out_dir / "final_states.png").name
    if n["queue"]:
        figs["queue"] = figures.queue_cdf(df, out_dir / "queue_cdf.png").name
    figs["submissions"] = figures.submissions(n["submissions"], out_dir / "submissions.png").name
    if n["users"]:
        figs["users"] = figures.user_concentration(
            df, n["users"], out_dir / "user_concentration.png"
        ).name
    if n["repetition"]:
        figs["repetition"] = figures.repetition(
            per_user_ape, n["repetition"], out_dir / "repetition.png"
        ).name
    if n["vcs"]:
        figs["vcs"] = figures.vcs(n["vcs"], out_dir / "vcs.png").name
    if n["time_limits"]:
        figs["time_limits"] = figures.time_limits(df, out_dir / "time_limits.png").name
    return figs


def _qssf_whatif(
    frame: TraceFrame,
    f: Mapping[str, bool],
    opts: Options,
    g: dict[str, Any],
    figs: dict[str, str],
    log: Say,
) -> None:
    """The QSSF simulation summary (or why not) into ``g``."""
    out_dir = opts.out_dir
    if not opts.qssf:
        g["qssf_note"] = "not run (--no-qssf)"
    elif not f["gpus"]:
        g["qssf_note"] = "no job asks for a GPU: nothing to schedule"
    else:
        from gpuhint.lab.evaluation.qssf import InputError

        jobs = frame.tail if frame.tail else []
        log(f"QSSF simulation on {len(jobs):,} jobs (FIFO, SJF, SRTF, QSSF, oracle)")
        try:
            g["qssf"] = whatif.qssf_summary(
                jobs,
                frame.rows,
                model=opts.model,
                vc_nodes=opts.vc_nodes,
                target_load=opts.target_load,
                plot=out_dir / "qssf_jct_cdf.png",
                progress=log,
            )
            figs["qssf"] = g["qssf"]["plot"]
        except InputError as exc:
            g["qssf_note"] = f"not run: {exc}"


def _trace_checks(df: Any, absolute: bool, has_starts: bool) -> list[dict[str, Any]]:
    """The gaps and oddities of :mod:`gpuhint.lab.analysis.checks` on the frame."""
    by_line = df.sort_values("line", kind="stable")
    return checks.trace_checks(
        df["submit"].to_numpy(dtype="float64"),
        df["duration"].to_numpy(dtype="float64"),
        absolute,
        submits_in_file_order=by_line["submit"].to_numpy(dtype="float64"),
        starts=by_line["start"].to_numpy(dtype="float64") if has_starts else None,
        id_hashes=df["id_hash"].to_numpy() if "id_hash" in df else None,
    )


def _ces_jobs_whatif(
    frame: TraceFrame, f: Mapping[str, bool], opts: Options, g: dict[str, Any], log: Say
) -> None:
    """The CES estimate from the trace's own jobs (or why not) into ``g``."""
    g["ces_jobs"] = None
    g["ces_jobs_note"] = None
    if not opts.ces_jobs:
        g["ces_jobs_note"] = "not run (--no-ces)"
    elif not f["gpus"]:
        g["ces_jobs_note"] = "no job asks for a GPU: no node to power down"
    elif not frame.tail:
        g["ces_jobs_note"] = "not run (--no-qssf: the jobs were not kept)"
    else:
        g["ces_jobs"] = whatif.ces_jobs_summary(frame.tail, model=opts.model, progress=log)


def _ces_whatif(opts: Options, g: dict[str, Any], figs: dict[str, str], log: Say) -> None:
    """The CES replay summary (or why not) into ``g``."""
    out_dir = opts.out_dir
    if opts.series is None:
        g["ces_note"] = (
            "no load series given: pass --series FILE (time,active,total nodes per minute, "
            "or a Helios cluster_sequence) for the CES summary"
        )
    else:
        log(f"CES replay of {opts.series}")
        g["ces"] = whatif.ces_summary(
            opts.series,
            test_days=opts.ces_test_days,
            test_from=opts.ces_test_from,
            test_to=opts.ces_test_to,
            plot=out_dir / "ces_load.png",
            progress=opts.progress,
        )
        figs["ces"] = g["ces"]["plot"]


def write_json(numbers: Mapping[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(numbers, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path
