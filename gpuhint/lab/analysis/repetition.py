"""Repetitiveness: does a user's history predict the next job? The paper's history rule.

Replayed online over a trace's jobs frame (:mod:`gpuhint.lab.analysis.reader`); the
numbers are the ``repetition`` section of ``docs/analyze.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpuhint.lab.analysis.stats import MIN_USER_JOBS, num


def _finished_before_submit(
    group: np.ndarray, submit: np.ndarray, end: np.ndarray, duration: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per job: how many jobs of its group finished before it was submitted, and the sum
    of their durations. A finish at the very submit time does not count (the online
    engine handles a submit before a finish at the same time)."""
    n = len(group)
    g = np.concatenate([group, group])
    t = np.concatenate([submit, end])
    kind = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(n, dtype=np.int8)])
    val = np.concatenate([np.zeros(n), duration])
    order = np.lexsort((kind, t, g))  # by group, then time, submits before finishes
    gs, ks, vs = g[order], kind[order], val[order]
    c_before = np.cumsum(ks) - ks  # finishes strictly before each position, trace-wide
    s_before = np.cumsum(vs) - vs
    first = np.ones(2 * n, dtype=bool)
    first[1:] = gs[1:] != gs[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(2 * n), 0))
    cnt = c_before - c_before[start]
    tot = s_before - s_before[start]
    is_submit = ks == 0
    rows = order[is_submit]
    out_c = np.zeros(n, dtype=np.int64)
    out_s = np.zeros(n)
    out_c[rows] = cnt[is_submit]
    out_s[rows] = tot[is_submit]
    return out_c, out_s


def history_rule(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's history rule, replayed online over the trace.

    As ``models/history.py`` keeps it (per VC): a job is predicted, when it is submitted,
    as the mean duration of the same user's jobs with the same GPU count that have
    finished by then, else of all the user's finished jobs; without either it has no
    prediction. A job finishes at its start (its submit when the trace has no start)
    plus its duration. Returns ``user``, ``predicted``, ``duration``, ``ape`` (absolute
    error over the true duration, at least 1 s) and ``same_size_prior`` (an earlier
    *submitted* job of the same user and GPU count exists) per job with a user.
    """
    d = df.loc[df["user"].notna(), ["vc", "user", "gpus", "duration", "submit", "start"]]
    submit = d["submit"].to_numpy(dtype="float64")
    start = np.fmax(d["start"].to_numpy(dtype="float64"), submit)  # NaN start -> submit
    dur = d["duration"].to_numpy(dtype="float64")
    end = start + dur
    by_size = d.groupby(["vc", "user", "gpus"], observed=True, sort=False)
    by_user = d.groupby(["vc", "user"], observed=True, sort=False)
    cs, ss = _finished_before_submit(by_size.ngroup().to_numpy(), submit, end, dur)
    cu, su = _finished_before_submit(by_user.ngroup().to_numpy(), submit, end, dur)
    with np.errstate(invalid="ignore", divide="ignore"):
        pred = np.where(
            cs > 0, ss / np.maximum(cs, 1), np.where(cu > 0, su / np.maximum(cu, 1), np.nan)
        )
    predicted = pd.Series(pred, index=d.index)
    ape = (predicted - d["duration"]).abs() / d["duration"].clip(lower=1.0)
    return pd.DataFrame(
        {
            "user": d["user"],
            "predicted": predicted,
            "duration": d["duration"],
            "ape": ape,
            "same_size_prior": by_size.cumcount() > 0,
        }
    )


def repetition_stats(df: pd.DataFrame, h: pd.DataFrame | None = None) -> dict[str, Any]:
    """Repetition numbers; ``h`` is :func:`history_rule`'s result when already computed."""
    h = history_rule(df) if h is None else h
    scored = h.dropna(subset=["ape"])
    per_user = scored.groupby("user", observed=True)["ape"].agg(["median", "size"])
    per_user = per_user[per_user["size"] >= MIN_USER_JOBS]
    med = per_user["median"]
    return {
        "jobs_with_user": len(h),
        "same_user_same_gpus_prior_share": num(h["same_size_prior"].mean()) if len(h) else None,
        "jobs_scored": len(scored),
        "median_ape": num(scored["ape"].median()) if len(scored) else None,
        "within_2x_share": num(
            (
                (scored["predicted"] <= 2 * scored["duration"].clip(lower=1.0))
                & (scored["predicted"] >= scored["duration"] / 2)
            ).mean()
        )
        if len(scored)
        else None,
        "median_factor": num(_factor(scored).median()) if len(scored) else None,
        "users_scored": len(med),
        "min_jobs_per_user": MIN_USER_JOBS,
        "user_median_ape_median": num(med.median()) if len(med) else None,
        "users_median_ape_under_50pct_share": num((med < 0.5).mean()) if len(med) else None,
    }


def _factor(h: pd.DataFrame) -> pd.Series:
    """How many times off each prediction is: max(p/t, t/p), durations at least 1 s."""
    p = h["predicted"].clip(lower=1.0)
    t = h["duration"].clip(lower=1.0)
    return np.maximum(p / t, t / p)


def per_user_median_ape(df: pd.DataFrame, h: pd.DataFrame | None = None) -> pd.Series:
    """Each user's median history-rule error (users with at least MIN_USER_JOBS scored)."""
    h = (history_rule(df) if h is None else h).dropna(subset=["ape"])
    per_user = h.groupby("user", observed=True)["ape"].agg(["median", "size"])
    return per_user.loc[per_user["size"] >= MIN_USER_JOBS, "median"]
