"""Assemble a trace characterization: numbers, figure files, the JSON and the HTML report.

:func:`analyze` computes every section the trace has the fields for and writes its
figures into the output folder; :func:`render_html` turns the numbers into one
self-contained HTML page (figures embedded as ``data:`` PNGs, inline CSS, no script, no
external reference). The JSON keys are documented in ``docs/analyze.md``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuhint.lab.analysis import figures, stats, whatif
from gpuhint.lab.analysis.reader import TraceFrame

SCHEMA_VERSION = 1

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


SECTIONS: tuple[tuple[str, str], ...] = (
    ("duration", "Job duration"),
    ("gpu_demand", "GPU demand"),
    ("states", "Final states"),
    ("queue", "Queueing delay"),
    ("submissions", "Submissions over the day and the week"),
    ("users", "User concentration"),
    ("repetition", "Repetitiveness: does a user's history predict the next job?"),
    ("vcs", "Virtual clusters"),
    ("time_limits", "Requested time limits"),
)


def finite(obj: Any) -> Any:
    """NaN and infinities as None, recursively (JSON has neither)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def analyze(frame: TraceFrame, opts: Options, say: Say | None = None) -> dict[str, Any]:
    """Every section's numbers; figures are written to ``opts.out_dir``."""
    log = say or (lambda _m: None)
    out_dir = opts.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    df = frame.jobs
    t0 = time.perf_counter()
    f = stats.fields_present(df)
    skipped: dict[str, str] = {}
    figs: dict[str, str] = {}
    secs: dict[str, float] = {"read": round(frame.seconds, 3)}

    def need(section: str, ok: bool, why: str) -> bool:
        if not ok:
            skipped[section] = why
        return ok

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
        hist = stats.history_rule(df)
        n["repetition"] = stats.repetition_stats(df, hist)
        per_user_ape = stats.per_user_median_ape(df, hist)
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
    secs["stats"] = round(time.perf_counter() - t0, 3)

    log("drawing figures")
    t1 = time.perf_counter()
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
    secs["figures"] = round(time.perf_counter() - t1, 3)

    g: dict[str, Any] = {"qssf": None, "qssf_note": None, "ces": None, "ces_note": None}
    t2 = time.perf_counter()
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
    secs["qssf"] = round(time.perf_counter() - t2, 3)
    t3 = time.perf_counter()
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
    secs["ces"] = round(time.perf_counter() - t3, 3)
    g["notes"] = whatif.predictor_notes(f, n["repetition"], g["qssf"])
    n["gpuhint"] = g
    n["skipped"] = skipped
    n["figures"] = figs
    secs["total"] = round(frame.seconds + time.perf_counter() - t0, 3)
    n["seconds"] = secs
    return finite(n)


def write_json(numbers: Mapping[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(numbers, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:2em}table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}img{max-width:100%;height:auto;display:block;
margin:.5em 0}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em;
margin:.6em 0}.muted{color:#666;font-size:.9em}.big{font-size:1.1em}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _fmt(v: Any, kind: str = "") -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "s":
        return _dur(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return _e(v)


def _dur(s: float) -> str:
    if s < 120:
        return f"{s:,.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:,.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:,.1f} h"
    return f"{s / 86400:,.1f} d"


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _img(out_dir: Path, name: str | None, alt: str) -> str:
    if not name:
        return ""
    data = base64.b64encode((out_dir / name).read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _desc_rows(d: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    return [
        [
            _e(k),
            _fmt(v["jobs"]),
            _fmt(v["median_s"], "s"),
            _fmt(v["mean_s"], "s"),
            _fmt(v["p90_s"], "s"),
            _fmt(v["p99_s"], "s"),
        ]
        for k, v in d.items()
        if v["jobs"]
    ]


_DESC_HEAD = ["jobs", "count", "median", "mean", "p90", "p99"]


def _section_body(key: str, n: Mapping[str, Any]) -> str:
    v = n[key]
    if key == "duration":
        rows = _desc_rows({"all jobs": v["all"], "GPU jobs": v["gpu"], "CPU jobs": v["cpu"]})
        rows += _desc_rows({f"GPU jobs, {k} GPU": d for k, d in v["by_gpus"].items()})
        extra = ""
        if v["gpu_jobs_under_1h_share"] is not None:
            extra = (
                f"<p>{_fmt(v['gpu_jobs_under_1h_share'], 'pct')} of GPU jobs run under an "
                f"hour; they use {_fmt(v['gpu_time_of_jobs_under_1h_share'], 'pct')} of the "
                "GPU time.</p>"
            )
        return _table(_DESC_HEAD, rows) + extra
    if key == "gpu_demand":
        rows = [
            [
                _e(r["gpus"]),
                _fmt(r["jobs"]),
                _fmt(r["job_share"], "pct"),
                _fmt(r["gpu_hours"]),
                _fmt(r["gpu_time_share"], "pct"),
            ]
            for r in v["buckets"]
            if r["jobs"]
        ]
        return _table(
            ["GPUs per job", "jobs", "share of jobs", "GPU hours", "share of GPU time"], rows
        ) + (
            f"<p>GPU jobs ask for {_fmt(v['gpu_jobs_mean_gpus'])} GPUs on average (median "
            f"{_fmt(v['gpu_jobs_median_gpus'])}); {_fmt(v['single_gpu_job_share'], 'pct')} "
            "ask for one.</p>"
        )
    if key == "states":
        rows = []
        for label, part in (("all jobs", v["all"]), ("GPU jobs", v["gpu"]), ("CPU jobs", v["cpu"])):
            if not part["jobs"]:
                continue
            rows.append(
                [f"{label}, by count"] + [_fmt(part["by_count"][k], "pct") for k in _STATES]
            )
            rows.append(
                [f"{label}, by GPU time"] + [_fmt(part["by_gpu_time"][k], "pct") for k in _STATES]
            )
        raw = ", ".join(f"{_e(k)} {c:,}" for k, c in v["states"].items())
        return _table(["", *_STATES], rows) + f"<p class=muted>states as recorded: {raw}</p>"
    if key == "queue":
        rows = [
            [
                _e(label),
                _fmt(d["jobs"]),
                _fmt(d["median_s"], "s"),
                _fmt(d["mean_s"], "s"),
                _fmt(d["p90_s"], "s"),
                _fmt(d["zero_share"], "pct"),
                _fmt(d["over_1h_share"], "pct"),
            ]
            for label, d in (("all jobs", v["all"]), ("GPU jobs", v["gpu"]), ("CPU jobs", v["cpu"]))
            if d["jobs"]
        ]
        return _table(["jobs", "count", "median", "mean", "p90", "no wait", "wait > 1 h"], rows)
    if key == "submissions":
        rows = [[f"{h:02d}", _fmt(c)] for h, c in enumerate(v["by_hour"])]
        t = _table(["hour", "jobs"], rows)
        if v["by_weekday"] is not None:
            t += _table(list(v["by_weekday"]), [[_fmt(c) for c in v["by_weekday"].values()]])
        ptt = v["peak_to_trough"]
        return (
            f"<p>Clock: {_e(v['clock'])}. Busiest hour {v['peak_hour']:02d}:00, quietest "
            f"{v['quietest_hour']:02d}:00"
            + (f" ({ptt:.1f}x fewer submissions)" if ptt else "")
            + f"; {_fmt(v['jobs_per_day'])} jobs a day.</p>"
            + f"<details><summary>jobs per hour and day</summary>{t}</details>"
        )
    if key == "users":
        rows = [
            [
                f"top {k.split('_')[1].removesuffix('pct')}% ({t['users']:,} users)",
                _fmt(t["gpu_time_share"], "pct"),
            ]
            for k, t in v["top"].items()
        ]
        top = [
            [_e(u["user"]), _fmt(u["jobs"]), _fmt(u["gpu_hours"]), _fmt(u["gpu_time_share"], "pct")]
            for u in v["top_users"]
        ]
        return (
            _table(["users", "share of GPU time"], rows)
            + f"<p>{v['users']:,} users; the median user submitted "
            f"{_fmt(v['jobs_per_user_median'])} jobs.</p>"
            + _table(["heaviest users", "jobs", "GPU hours", "share of GPU time"], top)
        )
    if key == "repetition":
        return (
            "<p>The paper's history rule predicts a job, at its submit, as the mean duration "
            "of the same user's finished jobs with the same GPU count (else of all the user's "
            "finished jobs), replayed online over the trace.</p>"
            + _table(
                ["measure", "value"],
                [
                    ["jobs with a user", _fmt(v["jobs_with_user"])],
                    [
                        "jobs after an earlier job of the same user and GPU count",
                        _fmt(v["same_user_same_gpus_prior_share"], "pct"),
                    ],
                    [
                        "jobs the rule predicts (the user has an earlier job)",
                        _fmt(v["jobs_scored"]),
                    ],
                    [
                        "median |error| / true duration, all predicted jobs",
                        _fmt(v["median_ape"], "pct"),
                    ],
                    [
                        "median factor off (max of predicted/true, true/predicted)",
                        _fmt(v["median_factor"]),
                    ],
                    ["predicted within 2x of the true duration", _fmt(v["within_2x_share"], "pct")],
                    [
                        f"users with >= {v['min_jobs_per_user']} predicted jobs",
                        _fmt(v["users_scored"]),
                    ],
                    [
                        "median over those users of their median error",
                        _fmt(v["user_median_ape_median"], "pct"),
                    ],
                    [
                        "users whose median error is under 50%",
                        _fmt(v["users_median_ape_under_50pct_share"], "pct"),
                    ],
                ],
            )
        )
    if key == "vcs":
        rows = [
            [
                _e(r["vc"]),
                _fmt(r["jobs"]),
                _fmt(r["gpu_jobs"]),
                _fmt(r["users"]),
                _fmt(r["gpu_hours"]),
                _fmt(r["gpu_time_share"], "pct"),
                _fmt(r["median_duration_gpu_s"], "s"),
                _fmt(r["mean_duration_gpu_s"], "s"),
                _fmt(r["max_gpus"]),
                _fmt(r["mean_queue_gpu_s"], "s"),
                _fmt(r["completion_rate_gpu"], "pct"),
            ]
            for r in v
        ]
        return _table(
            [
                "VC",
                "jobs",
                "GPU jobs",
                "users",
                "GPU hours",
                "GPU time",
                "median GPU job",
                "mean GPU job",
                "max GPUs",
                "mean GPU queue",
                "GPU completed",
            ],
            rows,
        )
    if key == "time_limits":
        return _table(
            ["measure", "value"],
            [
                ["jobs with a time limit", _fmt(v["jobs"])],
                ["median run time / time limit", _fmt(v["median_used_share"], "pct")],
                ["jobs using under half their limit", _fmt(v["under_half_share"], "pct")],
                [
                    "jobs reaching their limit (run time >= 99% of it)",
                    _fmt(v["at_limit_share"], "pct"),
                ],
                [
                    "GPU time reserved by the limits but not used",
                    _fmt(v["unused_gpu_time_share"], "pct"),
                ],
                ["median time limit", _fmt(v["median_limit_s"], "s")],
            ],
        ) + (
            "<p class=muted>A scheduler that backfills by time limits plans with these "
            "numbers; gpuhint's predicted durations are what the jobs really take.</p>"
        )
    return ""  # pragma: no cover


_STATES = ["completed", "cancelled", "failed", "unknown"]

_SUMMARY_KEYS = (
    ("job_num", ""), ("gpu_job_num", ""), ("cpu_job_num", ""),
    ("avg_run_time_gpu", "s"), ("med_run_time_gpu", "s"),
    ("avg_run_time_cpu", "s"), ("med_run_time_cpu", "s"),
    ("avg_que_time_gpu", "s"), ("med_que_time_gpu", "s"),
    ("avg_gpu_num", ""), ("med_gpu_num", ""),
    ("complete_rate_gpu", "pct"), ("cancel_rate_gpu", "pct"), ("fail_rate_gpu", "pct"),
)  # fmt: skip


def _loop_words(q: Mapping[str, Any]) -> str:
    if q.get("loop") == "closed":
        updates = q.get("hint_updates")
        return (
            ", closed loop: it learns and re-ranks the waiting jobs inside the simulated "
            "schedule" + (f", {updates:,} hint updates" if updates else "")
        )
    if q.get("loop") == "open":
        return ", open loop: hints from the trace's own timeline"
    return ""


def _utc(iso: str) -> str:
    """``2017-12-01T00:00:00+00:00`` as ``2017-12-01 00:00``."""
    return iso[:16].replace("T", " ")


def _gpuhint_section(n: Mapping[str, Any], out_dir: Path) -> str:
    g = n["gpuhint"]
    parts = ["<h2 id=gpuhint>What gpuhint can do for this cluster</h2>"]
    q = g["qssf"]
    parts.append("<h3>QSSF priority hints</h3>")
    if q is None:
        parts.append(f"<p class=note>QSSF: {_e(g['qssf_note'])}</p>")
    else:
        avg = q["avg_jct_s"]
        rows = [
            [
                _e(name),
                _fmt(avg[name], "s"),
                _fmt(q["avg_queue_s"][name], "s"),
                _fmt(avg[name] / avg["fifo"] if avg.get("fifo") else None),
            ]
            for name in avg
        ]
        wu = q.get("without_users")
        if wu:
            blind = wu["avg_jct_s"]
            rows.append(
                [
                    "qssf, hints blind to users and names",
                    _fmt(blind, "s"),
                    "–",
                    _fmt(blind / avg["fifo"] if avg.get("fifo") else None),
                ]
            )
        fq, qo = q["jct_ratio_fifo_over_qssf"], q["jct_ratio_qssf_over_oracle"]
        sizes = ", ".join(f"{_e(vc)} {k}" for vc, k in q["vc_sizes"].items())
        parts.append(
            f"<p class=big>Scheduling the {_e(q['window'])} ({q['jobs_simulated']:,} GPU jobs) "
            "smallest expected service first with gpuhint's online hints "
            f"(<code>{_e(q['model'])}</code>{_loop_words(q)}) gives an average "
            "job completion time "
            f"<b>{_fmt(fq)}x</b> shorter than FIFO and <b>{_fmt(qo)}x</b> the oracle's "
            "(which knows every job's true GPUs x duration).</p>"
            + _table(["policy", "average JCT", "average queue", "x FIFO"], rows)
            + f"<p class=muted>Simulated per VC with 8-GPU nodes ({sizes}; "
            f"{_e(', '.join(sorted(set(q['vc_sizing'].values()))))}). Predictor error on "
            f"this trace: mean |log duration error| {_fmt(q['mae_log'])}, median "
            f"|error| {_fmt(q['median_abs_pct_error'], 'pct')}. Same code as "
            "<code>gpuhint evaluate qssf</code>.</p>"
            + _img(out_dir, q["plot"], "JCT CDF by policy")
        )
    parts.append("<h3>CES power advice</h3>")
    c = g["ces"]
    if c is None:
        parts.append(f"<p class=note>CES: {_e(g['ces_note'])}</p>")
    else:
        parts.append(
            f"<p class=big>On {_e(c['series'])} ({c['total_nodes']} nodes), over "
            f"{_e(_utc(c['test_from']))} .. {_e(_utc(c['test_to']))} UTC: utilization of "
            "powered-on "
            f"nodes {_fmt(c['util_before'], 'pct')} → <b>{_fmt(c['util_after'], 'pct')}</b>, "
            f"{c['mean_powered_off']:.1f} nodes off on average (~{c['energy_saved_kwh']:,.0f} "
            f"kWh), {c['shortfall_node_slots']} shortfall node-slots, "
            f"{c['changes_per_day']:.2f} changes a day. Same code as "
            "<code>gpuhint evaluate ces</code>.</p>" + _img(out_dir, c["plot"], "CES replay")
        )
    parts.append("<h3>What the trace gives the predictor</h3>")
    parts.append("".join(f"<p class=note>{_e(s)}</p>" for s in g["notes"]))
    return "".join(parts)


def _as_int(v: float | None, kind: str) -> float | int | None:
    """Counts of the paper's table as ints (they are stored as floats)."""
    return int(v) if v is not None and kind == "" and v == int(v) and v > 100 else v


def findings(n: Mapping[str, Any]) -> list[str]:
    """The headline facts of a trace in plain sentences, from its numbers."""
    out: list[str] = []
    d = n["duration"]["gpu"]
    if d["jobs"]:
        line = (
            f"Half of the GPU jobs run under {_dur(d['median_s'])}, yet the mean is "
            f"{_dur(d['mean_s'])}"
        )
        short, short_t = (
            n["duration"]["gpu_jobs_under_1h_share"],
            n["duration"]["gpu_time_of_jobs_under_1h_share"],
        )
        if short and short_t is not None:
            line += (
                f": the {_fmt(short, 'pct')} that end within an hour use "
                f"{_fmt(short_t, 'pct')} of the GPU time"
            )
        out.append(line + ".")
    g = n["gpu_demand"]
    if g and g["single_gpu_job_share"] is not None:
        big = [r for r in g["buckets"] if r["gpus"] not in ("0", "1", "2", "3-4", "5-8")]
        big_jobs = sum(r["job_share"] or 0 for r in big)
        big_time = sum(r["gpu_time_share"] or 0 for r in big)
        out.append(
            f"{_fmt(g['single_gpu_job_share'], 'pct')} of GPU jobs ask for one GPU; jobs of "
            f"more than 8 GPUs are {_fmt(big_jobs, 'pct')} of the jobs and use "
            f"{_fmt(big_time, 'pct')} of the GPU time."
        )
    st = n["states"]
    if st and st["gpu"]["jobs"]:
        c, t = st["gpu"]["by_count"], st["gpu"]["by_gpu_time"]
        bad = (c["cancelled"] or 0) + (c["failed"] or 0)
        bad_t = (t["cancelled"] or 0) + (t["failed"] or 0)
        out.append(
            f"{_fmt(bad, 'pct')} of GPU jobs end cancelled or failed, holding "
            f"{_fmt(bad_t, 'pct')} of the GPU time (failed alone: {_fmt(c['failed'], 'pct')} "
            f"of the jobs, {_fmt(t['failed'], 'pct')} of the time)."
        )
    q = n["queue"]
    if q and q["gpu"]["jobs"]:
        out.append(
            f"GPU jobs wait {_dur(q['gpu']['median_s'])} at the median and "
            f"{_dur(q['gpu']['mean_s'])} on average; {_fmt(q['gpu']['over_1h_share'], 'pct')} "
            "wait over an hour."
        )
    u = n["users"]
    if u and u["users"]:
        top = u["top"]["top_10pct"]
        out.append(
            f"The top 10% of users ({top['users']:,} of {u['users']:,}) use "
            f"{_fmt(top['gpu_time_share'], 'pct')} of the GPU time."
        )
    r = n["repetition"]
    if r and r["same_user_same_gpus_prior_share"] is not None:
        out.append(
            f"{_fmt(r['same_user_same_gpus_prior_share'], 'pct')} of jobs repeat an earlier "
            "job's user and GPU count: history has something to learn from."
        )
    sub = n["submissions"]
    if sub["peak_hour"] is not None:
        out.append(
            f"Submissions peak at {sub['peak_hour']:02d}:00 and are fewest at "
            f"{sub['quietest_hour']:02d}:00 ({sub['clock']})."
        )
    if not n["fields"]["user"]:
        out.append(
            "The trace records no users: gpuhint's predictor can tell jobs apart only by VC "
            "and GPU count (see the last section for what that costs)."
        )
    qs = n["gpuhint"]["qssf"]
    if qs and qs["jct_ratio_fifo_over_qssf"] and qs["jct_ratio_qssf_over_oracle"]:
        out.append(
            f"QSSF with gpuhint's hints: average JCT {qs['jct_ratio_fifo_over_qssf']:.2f}x "
            f"shorter than FIFO, {qs['jct_ratio_qssf_over_oracle']:.2f}x the oracle's."
        )
    return out


def render_html(n: Mapping[str, Any], out_dir: Path) -> str:
    """The whole report as one HTML string; figures are read from ``out_dir``."""
    o = n["overview"]
    absolute = n["fields"]["absolute_time"]

    def when(t: float | None) -> str:
        if t is None:
            return "–"
        if not absolute:
            return f"{t / 86400:,.1f} d"
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")

    title = f"gpuhint analyze: {Path(n['trace']).name}"
    head = (
        f"<h1>{_e(title)}</h1><p class=muted>{_e(n['trace'])} · format {_e(n['format'])} · "
        f"{n['rows']:,} jobs read, {n['rows_skipped']:,} bad rows skipped · made "
        f"{_e(n['created'])}</p>"
        f"<p class=big>{o['jobs']:,} jobs ({o['gpu_jobs']:,} GPU, {o['cpu_jobs']:,} CPU) from "
        f"{o['users']:,} users in {o['vcs']:,} VCs, submitted {when(o['first_submit'])} .. "
        f"{when(o['last_submit'])} ({o['span_days']:,.1f} days), "
        f"{o['gpu_hours']:,.0f} GPU hours.</p>"
    )
    hs = n["helios_summary"]
    paper = {k: v for k, v in stats.paper_clusters().items() if k != "total"}
    summary = _table(
        ["Helios cluster_summary column", "this trace", *(f"paper: {c}" for c in paper)],
        [
            [f"<code>{k}</code>", f"<b>{_fmt(hs[k], kind)}</b>"]
            + [_fmt(_as_int(c.get(k), kind), kind) for c in paper.values()]
            for k, kind in _SUMMARY_KEYS
        ],
    ) + (
        "<p class=muted>The paper's columns: the four Helios clusters of SenseTime, April .. "
        "September 2020 (Hu et al., SC '21; HeliosData, CC-BY-4.0).</p>"
    )
    fields = ", ".join(
        f"{k} {'✓' if v else '✗'}" for k, v in n["fields"].items() if k != "absolute_time"
    )
    skipped = "".join(
        f"<li>{_e(dict(SECTIONS)[k])} ({_e(why)})</li>" for k, why in n["skipped"].items()
    )
    toc = "".join(
        f'<li><a href="#{k}">{_e(t)}</a></li>' for k, t in SECTIONS if n.get(k) is not None
    )
    facts = "".join(f"<li>{_e(x)}</li>" for x in findings(n))
    body = [head, f"<ul class=big>{facts}</ul>", f"<p class=muted>fields: {fields}</p>"]
    if skipped:
        body.append(
            f"<div class=note>Skipped, the trace lacks what they need:<ul>{skipped}</ul></div>"
        )
    body.append(
        f"<ul>{toc}<li><a href='#gpuhint'>What gpuhint can do for this cluster</a></li></ul>"
    )
    body.append("<h2 id=summary>At a glance (the paper's per-cluster columns)</h2>" + summary)
    for key, t in SECTIONS:
        if n.get(key) is None:
            continue
        body.append(f"<h2 id={key}>{_e(t)}</h2>")
        body.append(_img(out_dir, n["figures"].get(key), t))
        body.append(_section_body(key, n))
    body.append(_gpuhint_section(n, out_dir))
    body.append(
        "<p class=muted>Numbers behind every figure: <code>analysis.json</code> beside this "
        "file. Made by <code>gpuhint analyze</code>.</p>"
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
