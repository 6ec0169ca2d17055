"""The analysis report as one self-contained HTML page, and its headline findings."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuhint.lab.analysis import stats
from gpuhint.lab.analysis.html_parts import (
    CSS,
    actions_box,
    checks_box,
    dur,
    esc,
    fmt,
    img,
    section_body,
    table,
    vs_fifo,
)

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


SIZING_RULE = (
    "the VC-sizing rule of <code>gpuhint evaluate qssf</code> and <code>gpuhint demo</code>: "
    "the nodes --vc-config gives, else enough 8-GPU nodes for the VC's GPU time to fill "
    "them at the offered load --target-load, models/simulator/sizing.py"
)


def _ces_jobs_html(g: Mapping[str, Any]) -> str:
    """The CES estimate from the trace's own jobs, or why there is none."""
    c = g.get("ces_jobs")
    if not c:
        return f"<p class=note>CES from the jobs: {esc(g.get('ces_jobs_note'))}</p>"
    base = c["all_on_energy_kwh"] or 0.0
    rows = [
        [
            esc(label),
            fmt(p["energy_saved_kwh"]),
            fmt(p["energy_saved_kwh"] / base if base else None, "pct"),
            fmt(p["added_wait_avg_s"], "s"),
            fmt(p["jobs_delayed"]),
        ]
        for label, p in (
            ("Slurm idle timer, SuspendTime = 1 h", c["idle_timer"]),
            (f"gpuhint job-aware policy (reserve q {c['gpuhint']['setting']:g})", c["gpuhint"]),
        )
    ]
    return (
        f"<p>The trace's {c['jobs']:,} GPU jobs on one pool of {c['nodes']} 8-GPU nodes "
        f"({esc(c['sized_by'])}) over {c['days']:,.1f} days: {fmt(base)} kWh with every "
        "node on.</p>"
        + table(["policy", "kWh saved", "of all-on", "added average wait", "jobs delayed"], rows)
        + "<p class=muted>Boot 300 s; 3,500 W busy, 700 W idle, 20 W off (the defaults of "
        "<code>gpuhint evaluate ces --trace</code>, which draws the whole frontier with your "
        "own pool, boot time and watts).</p>"
    )


def _utc(iso: str) -> str:
    """``2017-12-01T00:00:00+00:00`` as ``2017-12-01 00:00``."""
    return iso[:16].replace("T", " ")


def _gpuhint_section(n: Mapping[str, Any], out_dir: Path) -> str:
    g = n["gpuhint"]
    parts = ["<h2 id=gpuhint>What gpuhint can do for this cluster</h2>"]
    q = g["qssf"]
    parts.append("<h3>QSSF priority hints</h3>")
    if q is None:
        parts.append(f"<p class=note>QSSF: {esc(g['qssf_note'])}</p>")
    else:
        avg = q["avg_jct_s"]
        rows = [
            [
                esc(name),
                fmt(avg[name], "s"),
                fmt(q["avg_queue_s"][name], "s"),
                fmt(avg[name] / avg["fifo"] if avg.get("fifo") else None),
            ]
            for name in avg
        ]
        wu = q.get("without_users")
        if wu:
            blind = wu["avg_jct_s"]
            rows.append(
                [
                    "qssf, hints blind to users and names",
                    fmt(blind, "s"),
                    "–",
                    fmt(blind / avg["fifo"] if avg.get("fifo") else None),
                ]
            )
        fq, qo = q["jct_ratio_fifo_over_qssf"], q["jct_ratio_qssf_over_oracle"]
        sizes = ", ".join(f"{esc(vc)} {k}" for vc, k in q["vc_sizes"].items())
        parts.append(
            f"<p class=big>Scheduling the {esc(q['window'])} ({q['jobs_simulated']:,} GPU jobs) "
            "smallest expected service first with gpuhint's online hints "
            f"(<code>{esc(q['model'])}</code>{_loop_words(q)}) gives an average "
            "job completion time "
            f"<b>{esc(vs_fifo(fq))}</b> and <b>{fmt(qo)}x</b> the oracle's "
            "(which knows every job's true GPUs x duration).</p>"
            + table(["policy", "average JCT", "average queue", "x FIFO"], rows)
            + f"<p class=muted>Simulated per VC with 8-GPU nodes ({sizes}; "
            f"{esc(', '.join(sorted(set(q['vc_sizing'].values()))))}: {SIZING_RULE}). "
            "Predictor error on "
            f"this trace: mean |log duration error| {fmt(q['mae_log'])}, median "
            f"|error| {fmt(q['median_abs_pct_error'], 'pct')}. Same code as "
            "<code>gpuhint evaluate qssf</code>.</p>" + img(out_dir, q["plot"], "JCT CDF by policy")
        )
    parts.append("<h3>CES power advice</h3>")
    parts.append(_ces_jobs_html(g))
    c = g["ces"]
    if c is None:
        parts.append(f"<p class=note>CES on a load series: {esc(g['ces_note'])}</p>")
    else:
        parts.append(
            f"<p class=big>On {esc(c['series'])} ({c['total_nodes']} nodes), over "
            f"{esc(_utc(c['test_from']))} .. {esc(_utc(c['test_to']))} UTC: utilization of "
            "powered-on "
            f"nodes {fmt(c['util_before'], 'pct')} → <b>{fmt(c['util_after'], 'pct')}</b>, "
            f"{c['mean_powered_off']:.1f} nodes off on average (~{c['energy_saved_kwh']:,.0f} "
            f"kWh), {c['shortfall_node_slots']} shortfall node-slots, "
            f"{c['changes_per_day']:.2f} changes a day. Same code as "
            "<code>gpuhint evaluate ces</code>.</p>" + img(out_dir, c["plot"], "CES replay")
        )
    parts.append("<h3>What the trace gives the predictor</h3>")
    parts.append("".join(f"<p class=note>{esc(s)}</p>" for s in g["notes"]))
    return "".join(parts)


def _as_int(v: float | None, kind: str) -> float | int | None:
    """Counts of the paper's table as ints (they are stored as floats)."""
    return int(v) if v is not None and kind == "" and v == int(v) and v > 100 else v


def findings(n: Mapping[str, Any]) -> list[str]:
    """The headline facts of a trace in plain sentences, from its numbers."""
    return _job_findings(n) + _queue_and_user_findings(n)


def _job_findings(n: Mapping[str, Any]) -> list[str]:
    """Durations, GPU demand and end states."""
    out: list[str] = []
    d = n["duration"]["gpu"]
    if d["jobs"]:
        line = (
            f"Half of the GPU jobs run under {dur(d['median_s'])}, yet the mean is "
            f"{dur(d['mean_s'])}"
        )
        short, short_t = (
            n["duration"]["gpu_jobs_under_1h_share"],
            n["duration"]["gpu_time_of_jobs_under_1h_share"],
        )
        if short and short_t is not None:
            line += (
                f": the {fmt(short, 'pct')} that end within an hour use "
                f"{fmt(short_t, 'pct')} of the GPU time"
            )
        out.append(line + ".")
    g = n["gpu_demand"]
    if g and g["single_gpu_job_share"] is not None:
        big = [r for r in g["buckets"] if r["gpus"] not in ("0", "1", "2", "3-4", "5-8")]
        big_jobs = sum(r["job_share"] or 0 for r in big)
        big_time = sum(r["gpu_time_share"] or 0 for r in big)
        out.append(
            f"{fmt(g['single_gpu_job_share'], 'pct')} of GPU jobs ask for one GPU; jobs of "
            f"more than 8 GPUs are {fmt(big_jobs, 'pct')} of the jobs and use "
            f"{fmt(big_time, 'pct')} of the GPU time."
        )
    st = n["states"]
    if st and st["gpu"]["jobs"]:
        c, t = st["gpu"]["by_count"], st["gpu"]["by_gpu_time"]
        bad = (c["cancelled"] or 0) + (c["failed"] or 0)
        bad_t = (t["cancelled"] or 0) + (t["failed"] or 0)
        out.append(
            f"{fmt(bad, 'pct')} of GPU jobs end cancelled or failed, holding "
            f"{fmt(bad_t, 'pct')} of the GPU time (failed alone: {fmt(c['failed'], 'pct')} "
            f"of the jobs, {fmt(t['failed'], 'pct')} of the time)."
        )
    return out


def _queue_and_user_findings(n: Mapping[str, Any]) -> list[str]:
    """Waiting, users, repetition, submission hours, and what QSSF would do."""
    out: list[str] = []
    q = n["queue"]
    if q and q["gpu"]["jobs"]:
        out.append(
            f"GPU jobs wait {dur(q['gpu']['median_s'])} at the median and "
            f"{dur(q['gpu']['mean_s'])} on average; {fmt(q['gpu']['over_1h_share'], 'pct')} "
            "wait over an hour."
        )
    u = n["users"]
    if u and u["users"]:
        top = u["top"]["top_10pct"]
        out.append(
            f"The top 10% of users ({top['users']:,} of {u['users']:,}) use "
            f"{fmt(top['gpu_time_share'], 'pct')} of the GPU time."
        )
    r = n["repetition"]
    if r and r["same_user_same_gpus_prior_share"] is not None:
        out.append(
            f"{fmt(r['same_user_same_gpus_prior_share'], 'pct')} of jobs repeat an earlier "
            "job's user and GPU count: "
            + (
                "history has something to learn from."
                if r["same_user_same_gpus_prior_share"] >= 0.5
                else "most jobs come with little history to learn from."
            )
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
            f"QSSF with gpuhint's hints: average JCT {vs_fifo(qs['jct_ratio_fifo_over_qssf'])}, "
            f"{qs['jct_ratio_qssf_over_oracle']:.2f}x the oracle's."
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
        f"<h1>{esc(title)}</h1><p class=muted>{esc(n['trace'])} · format {esc(n['format'])} · "
        f"{n['rows']:,} jobs read, {n['rows_skipped']:,} bad rows skipped · made "
        f"{esc(n['created'])}</p>"
        f"<p class=big>{o['jobs']:,} jobs ({o['gpu_jobs']:,} GPU, {o['cpu_jobs']:,} CPU) from "
        f"{o['users']:,} users in {o['vcs']:,} VCs, submitted {when(o['first_submit'])} .. "
        f"{when(o['last_submit'])} ({o['span_days']:,.1f} days), "
        f"{o['gpu_hours']:,.0f} GPU hours.</p>"
    )
    hs = n["helios_summary"]
    paper = {k: v for k, v in stats.paper_clusters().items() if k != "total"}
    summary = table(
        ["Helios cluster_summary column", "this trace", *(f"paper: {c}" for c in paper)],
        [
            [f"<code>{k}</code>", f"<b>{fmt(hs[k], kind)}</b>"]
            + [fmt(_as_int(c.get(k), kind), kind) for c in paper.values()]
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
        f"<li>{esc(dict(SECTIONS)[k])} ({esc(why)})</li>" for k, why in n["skipped"].items()
    )
    toc = "".join(
        f'<li><a href="#{k}">{esc(t)}</a></li>' for k, t in SECTIONS if n.get(k) is not None
    )
    facts = "".join(f"<li>{esc(x)}</li>" for x in findings(n))
    body = [
        head,
        checks_box(n.get("trace_checks") or []),
        actions_box(n.get("actions") or []),
        f"<ul class=big>{facts}</ul>",
        f"<p class=muted>fields: {fields}</p>",
    ]
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
        body.append(f"<h2 id={key}>{esc(t)}</h2>")
        body.append(img(out_dir, n["figures"].get(key), t))
        body.append(section_body(key, n))
    body.append(_gpuhint_section(n, out_dir))
    body.append(
        "<p class=muted>Numbers behind every figure: <code>analysis.json</code> beside this "
        "file. Made by <code>gpuhint analyze</code>.</p>"
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
