"""The numbers of a trace characterization, computed with pandas on a :class:`TraceFrame`.

Each ``*_stats`` function takes the jobs frame of :mod:`gpuhint.lab.analysis.reader` and
returns a JSON-ready dict (keys documented in ``docs/analyze.md``), or ``None`` when the
trace lacks the fields it needs (:func:`fields_present` says which it has).

Conventions, as in the Helios paper: a *GPU job* asks for at least one GPU; *GPU time*
is GPUs x duration; *failed* groups FAILED, TIMEOUT and NODE_FAIL; times of day are
those of the trace's timestamps (Helios and Philly record local time without a zone).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

# GPU-count buckets: (label, low, high) inclusive.
DEMAND_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("0", 0, 0),
    ("1", 1, 1),
    ("2", 2, 2),
    ("3-4", 3, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-32", 17, 32),
    ("33-64", 33, 64),
    (">64", 65, 2**31 - 1),
)
DURATION_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-8", 5, 8),
    (">8", 9, 2**31 - 1),
)
STATE_GROUPS = {
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "UNKNOWN": "unknown",
}
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
ABSOLUTE_TIME_MIN = 365 * 86400.0
"""Submit times below one year of UNIX seconds are read as relative to the trace start."""
TOP_USER_FRACTIONS = (0.01, 0.05, 0.10)
MIN_USER_JOBS = 3
"""A user's median history-rule error is reported when at least this many jobs are scored."""


def num(x: Any) -> float | None:
    """A finite float, else None (JSON has no NaN)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def fields_present(df: pd.DataFrame) -> dict[str, bool]:
    """Which optional fields the trace carries.

    A field counts as present when at least one job has it; ``state`` when at least one
    job ended otherwise than COMPLETED (a reader without states marks every job
    COMPLETED); ``vc`` when a job's VC is not "default".
    """
    n = len(df)
    return {
        "user": bool(n and df["user"].notna().any()),
        "name": bool(n and df["name"].notna().any()),
        "start_time": bool(n and df["start"].notna().any()),
        "state": bool(n and (df["state"] != "COMPLETED").any()),
        "vc": bool(n and (df["vc"] != "default").any()),
        "gpus": bool(n and (df["gpus"] > 0).any()),
        "absolute_time": bool(n and float(df["submit"].min()) >= ABSOLUTE_TIME_MIN),
        "time_limit": bool(n and "limit" in df and df["limit"].notna().any()),
    }


def describe(values: pd.Series) -> dict[str, Any]:
    """count, mean, median, p90, p99 of a numeric series (None when empty)."""
    v = values.dropna()
    if v.empty:
        return {"jobs": 0, "mean_s": None, "median_s": None, "p90_s": None, "p99_s": None}
    q = v.quantile([0.5, 0.9, 0.99]).to_numpy()
    return {
        "jobs": len(v),
        "mean_s": num(v.mean()),
        "median_s": num(q[0]),
        "p90_s": num(q[1]),
        "p99_s": num(q[2]),
    }


def bucket_of(gpus: pd.Series, buckets: tuple[tuple[str, int, int], ...]) -> pd.Series:
    """The bucket label of each GPU count (an ordered categorical)."""
    edges = [b[1] - 0.5 for b in buckets] + [buckets[-1][2] + 0.5]
    labels = [b[0] for b in buckets]
    return pd.cut(gpus, bins=edges, labels=labels)


def gpu_time(df: pd.DataFrame) -> pd.Series:
    return df["gpus"].astype("float64") * df["duration"]


def overview(df: pd.DataFrame) -> dict[str, Any]:
    gpu = df["gpus"] > 0
    span = float(df["submit"].max() - df["submit"].min()) if len(df) else 0.0
    return {
        "jobs": len(df),
        "gpu_jobs": int(gpu.sum()),
        "cpu_jobs": int((~gpu).sum()),
        "users": int(df["user"].nunique()),
        "vcs": int(df["vc"].nunique()),
        "first_submit": num(df["submit"].min()) if len(df) else None,
        "last_submit": num(df["submit"].max()) if len(df) else None,
        "span_days": span / 86400,
        "gpu_hours": float(gpu_time(df).sum() / 3600),
        "gpus_max": int(df["gpus"].max()) if len(df) else 0,
    }


def duration_stats(df: pd.DataFrame) -> dict[str, Any]:
    gpu = df["gpus"] > 0
    g = df[gpu]
    by = bucket_of(g["gpus"], DURATION_BUCKETS)
    short = g["duration"] < 3600
    gt = gpu_time(g)
    total_gt = float(gt.sum())
    return {
        "all": describe(df["duration"]),
        "gpu": describe(g["duration"]),
        "cpu": describe(df.loc[~gpu, "duration"]),
        "by_gpus": {
            label: describe(g.loc[by == label, "duration"]) for label, _, _ in DURATION_BUCKETS
        },
        "gpu_jobs_under_1h_share": num(short.mean()) if len(g) else None,
        "gpu_time_of_jobs_under_1h_share": num(gt[short].sum() / total_gt)
        if total_gt > 0
        else None,
    }


def demand_stats(df: pd.DataFrame) -> dict[str, Any]:
    b = bucket_of(df["gpus"], DEMAND_BUCKETS)
    gt = gpu_time(df)
    jobs = df.groupby(b, observed=False).size()
    time_ = gt.groupby(b, observed=False).sum()
    n, total = len(df), float(gt.sum())
    rows = []
    for label, _, _ in DEMAND_BUCKETS:
        rows.append(
            {
                "gpus": label,
                "jobs": int(jobs.get(label, 0)),
                "job_share": num(jobs.get(label, 0) / n) if n else None,
                "gpu_hours": float(time_.get(label, 0.0) / 3600),
                "gpu_time_share": num(time_.get(label, 0.0) / total) if total > 0 else None,
            }
        )
    g = df.loc[df["gpus"] > 0, "gpus"]
    return {
        "buckets": rows,
        "gpu_jobs_mean_gpus": num(g.mean()) if len(g) else None,
        "gpu_jobs_median_gpus": num(g.median()) if len(g) else None,
        "single_gpu_job_share": num((g == 1).mean()) if len(g) else None,
    }


def state_group(df: pd.DataFrame) -> pd.Series:
    """completed / cancelled / failed / unknown per job (mapped on the categories)."""
    state = df["state"].astype("category")
    names = [STATE_GROUPS.get(str(c), "unknown") for c in state.cat.categories]
    codes = state.cat.codes.to_numpy()
    return pd.Series(np.asarray(names, dtype=object)[codes], index=df.index)


def state_stats(df: pd.DataFrame) -> dict[str, Any]:
    groups = state_group(df)
    gt = gpu_time(df)
    gpu = df["gpus"] > 0

    def shares(mask: pd.Series) -> dict[str, Any]:
        cnt = groups[mask].value_counts()
        tim = gt[mask].groupby(groups[mask]).sum()
        n, total = int(mask.sum()), float(gt[mask].sum())
        keys = ["completed", "cancelled", "failed", "unknown"]
        return {
            "jobs": n,
            "by_count": {k: num(cnt.get(k, 0) / n) if n else None for k in keys},
            "by_gpu_time": {k: num(tim.get(k, 0.0) / total) if total > 0 else None for k in keys},
            "gpu_seconds": {k: float(tim.get(k, 0.0)) for k in keys},
        }

    return {
        "all": shares(pd.Series(True, index=df.index)),
        "gpu": shares(gpu),
        "cpu": shares(~gpu),
        "states": {str(k): int(v) for k, v in df["state"].value_counts().items() if v},
    }


def queue_delay(df: pd.DataFrame) -> pd.Series:
    """Start minus submit (seconds, >= 0); NaN where the start time is missing."""
    return (df["start"] - df["submit"]).clip(lower=0.0)


def queue_stats(df: pd.DataFrame) -> dict[str, Any]:
    q = queue_delay(df)
    gpu = df["gpus"] > 0
    out: dict[str, Any] = {}
    for key, mask in (("all", None), ("gpu", gpu), ("cpu", ~gpu)):
        v = q if mask is None else q[mask]
        v = v.dropna()
        d = describe(v)
        d["zero_share"] = num((v <= 0).mean()) if len(v) else None
        d["over_1h_share"] = num((v > 3600).mean()) if len(v) else None
        out[key] = d
    out["jobs_with_start"] = int(q.notna().sum())
    return out


def submission_stats(df: pd.DataFrame, absolute: bool) -> dict[str, Any]:
    secs = df["submit"].to_numpy(dtype="float64")
    if not absolute:
        secs = secs - secs.min()
    hour = ((secs // 3600) % 24).astype("int64")
    # 1970-01-01 was a Thursday (weekday 3, Monday = 0).
    weekday = ((secs // 86400 + 3) % 7).astype("int64")
    by_hour = np.bincount(hour, minlength=24)[:24]
    by_day = np.bincount(weekday, minlength=7)[:7]
    days = max(1.0, (secs.max() - secs.min()) / 86400) if len(secs) else 1.0
    return {
        "clock": "trace timestamps" if absolute else "hours since the first submit",
        "by_hour": [int(x) for x in by_hour],
        "by_weekday": {WEEKDAYS[i]: int(by_day[i]) for i in range(7)} if absolute else None,
        "peak_hour": int(by_hour.argmax()) if len(secs) else None,
        "quietest_hour": int(by_hour.argmin()) if len(secs) else None,
        "peak_to_trough": num(by_hour.max() / by_hour.min()) if by_hour.min() > 0 else None,
        "jobs_per_day": num(len(secs) / days),
    }


def user_stats(df: pd.DataFrame) -> dict[str, Any]:
    """Share of GPU time of the top 1% / 5% / 10% of users (by GPU time)."""
    gt = gpu_time(df)
    per_user = gt.groupby(df["user"], observed=True).sum().sort_values(ascending=False)
    jobs = df.groupby("user", observed=True).size()
    n = len(per_user)
    total = float(per_user.sum())
    top = {}
    for f in TOP_USER_FRACTIONS:
        k = max(1, math.ceil(f * n))
        top[f"top_{round(f * 100)}pct"] = {
            "users": k,
            "gpu_time_share": num(per_user.iloc[:k].sum() / total) if total > 0 else None,
        }
    return {
        "users": n,
        "top": top,
        "top_users": [
            {
                "user": str(u),
                "gpu_hours": float(v / 3600),
                "gpu_time_share": num(v / total) if total > 0 else None,
                "jobs": int(jobs.get(u, 0)),
            }
            for u, v in per_user.iloc[:10].items()
        ],
        "jobs_per_user_median": num(jobs.median()) if n else None,
    }


def user_gpu_time_curve(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(fraction of users, cumulative share of GPU time), users sorted by GPU time."""
    per_user = gpu_time(df).groupby(df["user"], observed=True).sum().sort_values(ascending=False)
    n = len(per_user)
    total = float(per_user.sum())
    if n == 0 or total <= 0:
        return np.array([0.0]), np.array([0.0])
    x = np.arange(0, n + 1) / n
    y = np.concatenate([[0.0], per_user.cumsum().to_numpy() / total])
    return x, y


def vc_stats(df: pd.DataFrame, has_state: bool, has_start: bool) -> list[dict[str, Any]]:
    gt = gpu_time(df)
    total = float(gt.sum())
    gpu = df["gpus"] > 0
    frame = pd.DataFrame(
        {
            "vc": df["vc"],
            "user": df["user"],
            "gpus": df["gpus"],
            "gt": gt,
            "gpu_job": gpu,
            "dur_gpu": df["duration"].where(gpu),
            "queue_gpu": queue_delay(df).where(gpu),
            "done_gpu": (df["state"] == "COMPLETED").where(gpu).astype("float64"),
        }
    )
    g = frame.groupby("vc", observed=True)
    agg = pd.DataFrame(
        {
            "jobs": g.size(),
            "gpu_jobs": g["gpu_job"].sum(),
            "users": g["user"].nunique(),
            "gt": g["gt"].sum(),
            "med": g["dur_gpu"].median(),
            "mean": g["dur_gpu"].mean(),
            "max_gpus": g["gpus"].max(),
            "queue": g["queue_gpu"].mean(),
            "done": g["done_gpu"].mean(),
        }
    ).sort_values("gt", ascending=False, kind="stable")
    return [
        {
            "vc": str(vc),
            "jobs": int(r["jobs"]),
            "gpu_jobs": int(r["gpu_jobs"]),
            "users": int(r["users"]),
            "gpu_hours": float(r["gt"] / 3600),
            "gpu_time_share": num(r["gt"] / total) if total > 0 else None,
            "median_duration_gpu_s": num(r["med"]),
            "mean_duration_gpu_s": num(r["mean"]),
            "max_gpus": int(r["max_gpus"]),
            "mean_queue_gpu_s": num(r["queue"]) if has_start else None,
            "completion_rate_gpu": num(r["done"]) if has_state else None,
        }
        for vc, r in agg.iterrows()
    ]


def helios_summary(df: pd.DataFrame, has_state: bool, has_start: bool) -> dict[str, Any]:
    """The columns of the Helios ``cluster_summary`` (the paper's per-cluster table).

    Columns a trace cannot fill (no states, no start times) are None.
    """
    gpu = df["gpus"] > 0
    g, c = df[gpu], df[~gpu]
    q = queue_delay(df)
    gt = gpu_time(df)
    out: dict[str, Any] = {
        "gpu_num": None,
        "job_num": len(df),
        "cpu_job_num": len(c),
        "gpu_job_num": len(g),
        "avg_run_time_cpu": num(c["duration"].mean()) if len(c) else None,
        "avg_run_time_gpu": num(g["duration"].mean()) if len(g) else None,
        "avg_que_time_cpu": num(q[~gpu].mean()) if has_start and len(c) else None,
        "avg_que_time_gpu": num(q[gpu].mean()) if has_start and len(g) else None,
        "avg_gpu_num": num(g["gpus"].mean()) if len(g) else None,
        "med_run_time_cpu": num(c["duration"].median()) if len(c) else None,
        "med_run_time_gpu": num(g["duration"].median()) if len(g) else None,
        "med_que_time_cpu": num(q[~gpu].median()) if has_start and len(c) else None,
        "med_que_time_gpu": num(q[gpu].median()) if has_start and len(g) else None,
        "med_gpu_num": num(g["gpus"].median()) if len(g) else None,
    }
    groups = state_group(df)
    for suffix, mask in (("", None), ("_cpu", ~gpu), ("_gpu", gpu)):
        s = groups if mask is None else groups[mask]
        for key, grp in (("complete", "completed"), ("cancel", "cancelled"), ("fail", "failed")):
            out[f"{key}_rate{suffix}"] = num((s == grp).mean()) if has_state and len(s) else None
    for key, grp in (("complete", "completed"), ("cancel", "cancelled"), ("fail", "failed")):
        out[f"{key}_gpu_time"] = float(gt[groups == grp].sum()) if has_state else None
    return out


def paper_clusters() -> dict[str, dict[str, float]]:
    """The Helios paper's per-cluster table (shipped ``helios_cluster_summary.csv``), by
    cluster name: the anchors a trace's ``helios_summary`` is shown beside."""
    import csv
    from importlib import resources

    text = resources.files("gpuhint").joinpath("data/helios_cluster_summary.csv").read_text()
    out: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(text.splitlines()):
        name = row.pop("id")
        out[name] = {k: float(v) for k, v in row.items() if v}
    return out


def time_limit_stats(df: pd.DataFrame) -> dict[str, Any]:
    """How the run times compare with the time limits the jobs asked for (Slurm TimeLimit)."""
    d = df.loc[df["limit"].notna() & (df["limit"] > 0), ["duration", "limit", "gpus"]]
    used = d["duration"] / d["limit"]
    reserved = (d["gpus"] * d["limit"]).sum()
    unused = (d["gpus"] * (d["limit"] - d["duration"]).clip(lower=0)).sum()
    n = len(d)
    return {
        "jobs": n,
        "median_used_share": num(used.median()) if n else None,
        "under_half_share": num((used < 0.5).mean()) if n else None,
        "at_limit_share": num((used >= 0.99).mean()) if n else None,
        "unused_gpu_time_share": num(unused / reserved) if reserved > 0 else None,
        "median_limit_s": num(d["limit"].median()) if n else None,
    }
