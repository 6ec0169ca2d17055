"""HTML pieces of the analysis report: formatting, tables and one body per section."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:2em}table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}img{max-width:100%;height:auto;display:block;
margin:.5em 0}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em;
margin:.6em 0}.muted{color:#666;font-size:.9em}.big{font-size:1.1em}
.actions{background:#e8f4ea;border:1px solid #7cb987;border-radius:4px;padding:.4em 1em;
margin:1em 0}.actions h2{border:0;margin:.3em 0}.actions li{margin:.4em 0}
.warn{background:#fdecea;border-left:4px solid #d9534f;padding:.4em .8em;margin:.6em 0}
"""


def actions_box(actions: list[Mapping[str, str]]) -> str:
    """The report's "Actions" box: what to do, why, and which knob."""
    items = "".join(
        f"<li><b>{esc(a['action'])}</b><br>why: {esc(a['why'])}<br>"
        f"knob: <code>{esc(a['knob'])}</code></li>"
        for a in actions
    )
    return f"<div class=actions id=actions><h2>Actions</h2><ol>{items}</ol></div>"


def checks_box(found: list[Mapping[str, Any]]) -> str:
    """Warnings on gaps and oddities in the trace (empty when there are none)."""
    if not found:
        return ""
    items = "".join(f"<li>{esc(c['message'])}</li>" for c in found)
    return f"<div class=warn id=trace-checks>Check the trace first:<ul>{items}</ul></div>"


def vs_fifo(fifo_over_qssf: float | None, what: str = "FIFO") -> str:
    """QSSF's average JCT against FIFO's in words that follow the sign of the difference.

    >>> vs_fifo(1.17), vs_fifo(0.8), vs_fifo(1.0)
    ('1.17x shorter than FIFO', '1.25x longer than FIFO', 'the same as FIFO')
    """
    if not fifo_over_qssf:
        return f"not comparable with {what}"
    if round(fifo_over_qssf, 2) == 1.0:
        return f"the same as {what}"
    if fifo_over_qssf > 1:
        return f"{fifo_over_qssf:.2f}x shorter than {what}"
    return f"{1 / fifo_over_qssf:.2f}x longer than {what}"


def esc(x: Any) -> str:
    """``x`` as escaped HTML text."""
    return html.escape(str(x))


def fmt(v: Any, kind: str = "") -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "s":
        return dur(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return esc(v)


def dur(s: float) -> str:
    if s < 120:
        return f"{s:,.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:,.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:,.1f} h"
    return f"{s / 86400:,.1f} d"


def table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def img(out_dir: Path, name: str | None, alt: str) -> str:
    if not name:
        return ""
    data = base64.b64encode((out_dir / name).read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _desc_rows(d: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    return [
        [
            esc(k),
            fmt(v["jobs"]),
            fmt(v["median_s"], "s"),
            fmt(v["mean_s"], "s"),
            fmt(v["p90_s"], "s"),
            fmt(v["p99_s"], "s"),
        ]
        for k, v in d.items()
        if v["jobs"]
    ]


_DESC_HEAD = ["jobs", "count", "median", "mean", "p90", "p99"]


_STATES = ["completed", "cancelled", "failed", "unknown"]


def _duration(v: Any) -> str:
    rows = _desc_rows({"all jobs": v["all"], "GPU jobs": v["gpu"], "CPU jobs": v["cpu"]})
    rows += _desc_rows({f"GPU jobs, {k} GPU": d for k, d in v["by_gpus"].items()})
    extra = ""
    if v["gpu_jobs_under_1h_share"] is not None:
        extra = (
            f"<p>{fmt(v['gpu_jobs_under_1h_share'], 'pct')} of GPU jobs run under an "
            f"hour; they use {fmt(v['gpu_time_of_jobs_under_1h_share'], 'pct')} of the "
            "GPU time.</p>"
        )
    return table(_DESC_HEAD, rows) + extra


def _gpu_demand(v: Any) -> str:
    rows = [
        [
            esc(r["gpus"]),
            fmt(r["jobs"]),
            fmt(r["job_share"], "pct"),
            fmt(r["gpu_hours"]),
            fmt(r["gpu_time_share"], "pct"),
        ]
        for r in v["buckets"]
        if r["jobs"]
    ]
    return table(
        ["GPUs per job", "jobs", "share of jobs", "GPU hours", "share of GPU time"], rows
    ) + (
        f"<p>GPU jobs ask for {fmt(v['gpu_jobs_mean_gpus'])} GPUs on average (median "
        f"{fmt(v['gpu_jobs_median_gpus'])}); {fmt(v['single_gpu_job_share'], 'pct')} "
        "ask for one.</p>"
    )


def _states(v: Any) -> str:
    rows = []
    for label, part in (("all jobs", v["all"]), ("GPU jobs", v["gpu"]), ("CPU jobs", v["cpu"])):
        if not part["jobs"]:
            continue
        rows.append([f"{label}, by count"] + [fmt(part["by_count"][k], "pct") for k in _STATES])
        rows.append(
            [f"{label}, by GPU time"] + [fmt(part["by_gpu_time"][k], "pct") for k in _STATES]
        )
    raw = ", ".join(f"{esc(k)} {c:,}" for k, c in v["states"].items())
    return table(["", *_STATES], rows) + f"<p class=muted>states as recorded: {raw}</p>"


def _queue(v: Any) -> str:
    rows = [
        [
            esc(label),
            fmt(d["jobs"]),
            fmt(d["median_s"], "s"),
            fmt(d["mean_s"], "s"),
            fmt(d["p90_s"], "s"),
            fmt(d["zero_share"], "pct"),
            fmt(d["over_1h_share"], "pct"),
        ]
        for label, d in (("all jobs", v["all"]), ("GPU jobs", v["gpu"]), ("CPU jobs", v["cpu"]))
        if d["jobs"]
    ]
    return table(["jobs", "count", "median", "mean", "p90", "no wait", "wait > 1 h"], rows)


def _submissions(v: Any) -> str:
    rows = [[f"{h:02d}", fmt(c)] for h, c in enumerate(v["by_hour"])]
    t = table(["hour", "jobs"], rows)
    if v["by_weekday"] is not None:
        t += table(list(v["by_weekday"]), [[fmt(c) for c in v["by_weekday"].values()]])
    ptt = v["peak_to_trough"]
    return (
        f"<p>Clock: {esc(v['clock'])}. Busiest hour {v['peak_hour']:02d}:00, quietest "
        f"{v['quietest_hour']:02d}:00"
        + (f" ({ptt:.1f}x fewer submissions)" if ptt else "")
        + f"; {fmt(v['jobs_per_day'])} jobs a day.</p>"
        + f"<details><summary>jobs per hour and day</summary>{t}</details>"
    )


def _users(v: Any) -> str:
    rows = [
        [
            f"top {k.split('_')[1].removesuffix('pct')}% ({t['users']:,} users)",
            fmt(t["gpu_time_share"], "pct"),
        ]
        for k, t in v["top"].items()
    ]
    top = [
        [esc(u["user"]), fmt(u["jobs"]), fmt(u["gpu_hours"]), fmt(u["gpu_time_share"], "pct")]
        for u in v["top_users"]
    ]
    return (
        table(["users", "share of GPU time"], rows)
        + f"<p>{v['users']:,} users; the median user submitted "
        f"{fmt(v['jobs_per_user_median'])} jobs.</p>"
        + table(["heaviest users", "jobs", "GPU hours", "share of GPU time"], top)
    )


def _repetition(v: Any) -> str:
    return (
        "<p>The paper's history rule predicts a job, at its submit, as the mean duration "
        "of the same user's finished jobs with the same GPU count (else of all the user's "
        "finished jobs), replayed online over the trace.</p>"
        + table(
            ["measure", "value"],
            [
                ["jobs with a user", fmt(v["jobs_with_user"])],
                [
                    "jobs after an earlier job of the same user and GPU count",
                    fmt(v["same_user_same_gpus_prior_share"], "pct"),
                ],
                [
                    "jobs the rule predicts (the user has an earlier job)",
                    fmt(v["jobs_scored"]),
                ],
                [
                    "median |error| / true duration, all predicted jobs",
                    fmt(v["median_ape"], "pct"),
                ],
                [
                    "median factor off (max of predicted/true, true/predicted)",
                    fmt(v["median_factor"]),
                ],
                ["predicted within 2x of the true duration", fmt(v["within_2x_share"], "pct")],
                [
                    f"users with >= {v['min_jobs_per_user']} predicted jobs",
                    fmt(v["users_scored"]),
                ],
                [
                    "median over those users of their median error",
                    fmt(v["user_median_ape_median"], "pct"),
                ],
                [
                    "users whose median error is under 50%",
                    fmt(v["users_median_ape_under_50pct_share"], "pct"),
                ],
            ],
        )
    )


def _vcs(v: Any) -> str:
    rows = [
        [
            esc(r["vc"]),
            fmt(r["jobs"]),
            fmt(r["gpu_jobs"]),
            fmt(r["users"]),
            fmt(r["gpu_hours"]),
            fmt(r["gpu_time_share"], "pct"),
            fmt(r["median_duration_gpu_s"], "s"),
            fmt(r["mean_duration_gpu_s"], "s"),
            fmt(r["max_gpus"]),
            fmt(r["mean_queue_gpu_s"], "s"),
            fmt(r["completion_rate_gpu"], "pct"),
        ]
        for r in v
    ]
    return table(
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


def _time_limits(v: Any) -> str:
    return table(
        ["measure", "value"],
        [
            ["jobs with a time limit", fmt(v["jobs"])],
            ["median run time / time limit", fmt(v["median_used_share"], "pct")],
            ["jobs using under half their limit", fmt(v["under_half_share"], "pct")],
            [
                "jobs reaching their limit (run time >= 99% of it)",
                fmt(v["at_limit_share"], "pct"),
            ],
            [
                "GPU time reserved by the limits but not used",
                fmt(v["unused_gpu_time_share"], "pct"),
            ],
            ["median time limit", fmt(v["median_limit_s"], "s")],
        ],
    ) + (
        "<p class=muted>A scheduler that backfills by time limits plans with these "
        "numbers; gpuhint's predicted durations are what the jobs really take.</p>"
    )


_SECTION_HTML: dict[str, Callable[[Any], str]] = {
    "duration": _duration,
    "gpu_demand": _gpu_demand,
    "states": _states,
    "queue": _queue,
    "submissions": _submissions,
    "users": _users,
    "repetition": _repetition,
    "vcs": _vcs,
    "time_limits": _time_limits,
}


def section_body(key: str, n: Mapping[str, Any]) -> str:
    """The HTML of one characterization section (its figure aside)."""
    return _SECTION_HTML[key](n[key])
