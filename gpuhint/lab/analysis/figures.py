"""The figures of a trace characterization, as PNG files (matplotlib, headless).

Each function draws one figure from the jobs frame and writes it to ``path``. CDFs are
drawn through 1,001 quantiles, so a million-job trace plots as fast as a small one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuhint.lab.analysis import stats

DPI = 110


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _cdf(ax: Any, values: pd.Series, label: str, floor: float = 1.0, **kw: Any) -> None:
    v = values.dropna().to_numpy(dtype="float64")
    if v.size == 0:
        return
    qs = np.linspace(0.0, 1.0, 1001)
    xs = np.maximum(np.quantile(v, qs), floor)
    ax.plot(xs, qs, label=f"{label} (n={v.size:,})", **kw)


def _cdf_axes(ax: Any, xlabel: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # an empty panel (e.g. no GPU jobs): no legend
        ax.legend(fontsize=8, loc="lower right")
    for t, name in ((60, "1 min"), (3600, "1 h"), (86400, "1 day")):
        ax.axvline(t, color="0.7", lw=0.7, ls=":")
        ax.text(t, 0.02, name, fontsize=7, color="0.4", rotation=90, ha="right")


def duration_cdf(df: pd.DataFrame, path: Path) -> Path:
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    gpu = df["gpus"] > 0
    _cdf(a, df.loc[gpu, "duration"], "GPU jobs", color="tab:blue")
    if (~gpu).any():
        _cdf(a, df.loc[~gpu, "duration"], "CPU jobs", color="tab:gray")
    _cdf(a, df["duration"], "all jobs", color="black", ls="--", lw=0.8)
    a.set_title("job duration")
    _cdf_axes(a, "duration (s, log scale; under 1 s drawn at 1 s)")
    g = df[gpu]
    by = stats.bucket_of(g["gpus"], stats.DURATION_BUCKETS)
    for label, _, _ in stats.DURATION_BUCKETS:
        sel = g.loc[by == label, "duration"]
        if len(sel):
            _cdf(b, sel, f"{label} GPU")
    b.set_title("GPU job duration by GPUs per job")
    _cdf_axes(b, "duration (s, log scale)")
    return _save(fig, path)


def _gpus_words(label: str) -> str:
    return "1 GPU" if label == "1" else f"{label} GPUs"


def demand_title(demand: dict[str, Any]) -> str:
    """The GPU-demand figure's title, from its numbers: which GPU count holds the most
    jobs and which the most GPU time.

    >>> demand_title({"buckets": [
    ...     {"gpus": "1", "jobs": 8, "job_share": 0.8, "gpu_time_share": 0.58},
    ...     {"gpus": "9-16", "jobs": 2, "job_share": 0.2, "gpu_time_share": 0.42}]})
    'GPU demand: 80% of jobs ask for 1 GPU; those jobs hold the most GPU time (58%)'
    """
    rows = [r for r in demand["buckets"] if r["jobs"] and r["gpus"] != "0"]
    if not rows:
        return "GPU demand"
    by_jobs = max(rows, key=lambda r: r["job_share"] or 0)
    by_time = max(rows, key=lambda r: r["gpu_time_share"] or 0)
    head = (
        f"GPU demand: {by_jobs['job_share'] or 0:.0%} of jobs ask for "
        f"{_gpus_words(by_jobs['gpus'])}"
    )
    t = by_time["gpu_time_share"] or 0
    if by_time is by_jobs:
        return f"{head}; those jobs hold the most GPU time ({t:.0%})"
    return f"{head}; jobs of {_gpus_words(by_time['gpus'])} hold the most GPU time ({t:.0%})"


def gpu_demand(demand: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    rows = [r for r in demand["buckets"] if r["jobs"]]
    labels = [r["gpus"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    w = 0.4
    ax.bar(x - w / 2, [r["job_share"] or 0 for r in rows], w, label="share of jobs")
    ax.bar(x + w / 2, [r["gpu_time_share"] or 0 for r in rows], w, label="share of GPU time")
    ax.set_xticks(x, labels)
    ax.set_xlabel("GPUs per job")
    ax.set_ylabel("share")
    ax.set_title(demand_title(demand), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def final_states(states: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    keys = ["completed", "cancelled", "failed", "unknown"]
    colors = {"completed": "tab:green", "cancelled": "tab:orange", "failed": "tab:red"}
    colors["unknown"] = "0.7"
    bars = [
        ("all jobs, by count", states["all"]["by_count"]),
        ("GPU jobs, by count", states["gpu"]["by_count"]),
        ("GPU jobs, by GPU time", states["gpu"]["by_gpu_time"]),
    ]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, (_, shares) in enumerate(bars):
        left = 0.0
        for k in keys:
            v = shares.get(k) or 0.0
            if v <= 0:
                continue
            ax.barh(i, v, left=left, color=colors[k], label=k if i == 0 else None)
            if v >= 0.05:
                ax.text(left + v / 2, i, f"{v:.0%}", ha="center", va="center", fontsize=8)
            left += v
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share")
    ax.set_title("final states (failed = FAILED + TIMEOUT + NODE_FAIL)")
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    ax.legend(
        seen.values(),
        seen.keys(),
        fontsize=8,
        ncol=4,
        loc="lower center",
        bbox_to_anchor=(0.5, -0.45),
    )
    ax.invert_yaxis()
    return _save(fig, path)


def queue_cdf(df: pd.DataFrame, path: Path) -> Path:
    plt = _plt()
    q = stats.queue_delay(df)
    gpu = df["gpus"] > 0
    fig, ax = plt.subplots(figsize=(7, 4))
    _cdf(ax, q[gpu], "GPU jobs", color="tab:blue")
    if (~gpu).any():
        _cdf(ax, q[~gpu], "CPU jobs", color="tab:gray")
    ax.set_title("queueing delay (start - submit)")
    _cdf_axes(ax, "queueing delay (s, log scale; under 1 s drawn at 1 s)")
    return _save(fig, path)


def submissions(sub: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    has_days = sub["by_weekday"] is not None
    fig, axes = plt.subplots(1, 2 if has_days else 1, figsize=(11 if has_days else 6, 3.6))
    a = axes[0] if has_days else axes
    a.bar(range(24), sub["by_hour"], color="tab:blue")
    a.set_xticks(range(0, 24, 3))
    a.set_xlabel(f"hour of day ({sub['clock']})")
    a.set_ylabel("jobs submitted")
    a.set_title("submissions by hour of day")
    a.grid(axis="y", alpha=0.3)
    if has_days:
        b = axes[1]
        days = list(sub["by_weekday"])
        b.bar(range(7), [sub["by_weekday"][d] for d in days], color="tab:purple")
        b.set_xticks(range(7), days)
        b.set_title("submissions by day of week")
        b.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def user_concentration(df: pd.DataFrame, users: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    x, y = stats.user_gpu_time_curve(df)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x * 100, y, color="tab:blue", label="users sorted by GPU time")
    ax.plot([0, 100], [0, 1], color="0.6", ls=":", label="every user equal")
    for key, t in users["top"].items():
        share = t["gpu_time_share"]
        if share is None:
            continue
        pct = int(key.split("_")[1].removesuffix("pct"))
        ax.plot([pct], [share], "o", color="tab:red")
        ax.annotate(
            f"top {pct}%: {share:.0%}",
            (pct, share),
            xytext=(6, -12),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_xlabel("top users (% of users)")
    ax.set_ylabel("share of GPU time")
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"user concentration ({users['users']:,} users)")
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def repetition(per_user_ape: pd.Series, rep: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    v = np.sort(per_user_ape.to_numpy(dtype="float64"))
    if v.size:
        ys = np.arange(1, v.size + 1) / v.size
        ax.step(
            np.maximum(v, 1e-3),
            ys,
            where="post",
            color="tab:blue",
            label=f"users with >= {rep['min_jobs_per_user']} scored jobs (n={v.size:,})",
        )
    ax.axvline(0.5, color="0.6", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("user's median |predicted - true| / true duration (history rule)")
    ax.set_ylabel("fraction of users")
    ax.set_ylim(0, 1)
    ax.grid(True, which="both", alpha=0.3)
    share = rep["same_user_same_gpus_prior_share"]
    title = "repetitiveness: how well a user's history predicts the next job"
    if share is not None:
        title += f"\n{share:.0%} of jobs follow an earlier job of the same user and GPU count"
    ax.set_title(title, fontsize=10)
    if v.size:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(
            0.5,
            0.5,
            f"no user has {rep['min_jobs_per_user']} predicted jobs",
            ha="center",
            transform=ax.transAxes,
            color="0.4",
        )
    return _save(fig, path)


def vcs(rows: list[dict[str, Any]], path: Path, top: int = 20) -> Path:
    plt = _plt()
    rows = rows[:top]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(rows) + 1.2)))
    names = [r["vc"] for r in rows]
    ax.barh(range(len(rows)), [r["gpu_hours"] for r in rows], color="tab:blue")
    ax.set_yticks(range(len(rows)), names)
    for i, r in enumerate(rows):
        ax.text(r["gpu_hours"], i, f" {r['jobs']:,} jobs", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GPU hours")
    ax.set_title(f"virtual clusters by GPU time (top {len(rows)})")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def time_limits(df: pd.DataFrame, path: Path) -> Path:
    plt = _plt()
    d = df.loc[df["limit"].notna() & (df["limit"] > 0)]
    used = (d["duration"] / d["limit"]).clip(upper=1.5)
    fig, ax = plt.subplots(figsize=(7, 4))
    v = np.sort(used.to_numpy(dtype="float64"))
    if v.size:
        ax.step(
            v,
            np.arange(1, v.size + 1) / v.size,
            where="post",
            color="tab:blue",
            label=f"jobs with a time limit (n={v.size:,})",
        )
    ax.axvline(1.0, color="tab:red", ls=":", lw=0.8)
    ax.set_xlabel("run time / requested time limit (over 1.5 drawn at 1.5)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title("how much of the requested time limit jobs use")
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)
