"""What ``gpuhint evaluate qssf`` reports: the policies run, each one's result, the hints'
band scores, the whole report (its ``--json`` keys) and the JCT CDF plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpuhint.lab.evaluation.qssf_curve import BoundPoint, curve_dicts
from gpuhint.lab.evaluation.qssf_inputs import GPUS_PER_NODE
from gpuhint.lab.evaluation.qssf_online import OnlinePredictions
from gpuhint.lab.traces.readers import TraceJob
from models.simulator import PolicyKind, Summary
from models.simulator.metrics import Tails

Loop = Literal["closed", "open"]


@dataclass(frozen=True)
class PolicySpec:
    name: str
    kind: PolicyKind
    describe: str
    priority: str | None = None  # "oracle" | "online" | "given" | "loop" | "limit" | "hint"
    backfill: bool = False
    easy: bool = False  # EASY backfill (models.simulator.easy) ...
    run_times: str = "limit"  # ... on the requested time limits, or "hint": gpuhint's p90
    # (EASY's queue order: arrival, or with ``priority="hint"`` gpuhint's hints)


@dataclass
class PolicyResult:
    spec: PolicySpec
    summary: Summary
    jct: list[float]
    seconds: float
    wait: list[float] = field(default_factory=list)  # start - submit, aligned with jct
    tails: Tails | None = None

    def as_dict(self) -> dict[str, Any]:
        """The policy's JSON object: description, summary, then the tails (added keys)."""
        out: dict[str, Any] = {"description": self.spec.describe, **self.summary.as_dict()}
        if self.tails is not None:
            out.update(self.tails.as_dict())
        return out


@dataclass(frozen=True)
class BandStats:
    """How the QSSF hints written at submit compare with the true durations.

    ``band_coverage``: share of jobs whose true duration lies in the hint's 80% band
    [p10, p90] (over ``band_jobs``: the jobs whose hint has a band). ``share_off_2x``:
    share whose point forecast (``predicted_duration_s``) is off from the true duration
    by a factor of 2 or more either way; ``share_off_2x_expected`` the same for the
    expected duration the priority ranks by (``expected_duration_s`` at submit). Both
    over ``jobs``, with durations floored at 1 s so a 0-second job is not infinitely far
    off.
    """

    jobs: int
    band_jobs: int
    band_coverage: float
    share_off_2x: float
    share_off_2x_expected: float

    @staticmethod
    def empty() -> dict[str, Any]:
        return dict.fromkeys(
            ("band_coverage", "band_jobs", "share_off_2x", "share_off_2x_expected")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "band_coverage": self.band_coverage,
            "band_jobs": self.band_jobs,
            "share_off_2x": self.share_off_2x,
            "share_off_2x_expected": self.share_off_2x_expected,
        }


def _off_2x(predicted: float, true: float) -> bool:
    a, b = max(predicted, 1.0), max(true, 1.0)
    return max(a, b) >= 2.0 * min(a, b)


def band_stats(
    true: Sequence[float],
    predicted: Sequence[float],
    expected: Sequence[float],
    p10: Sequence[float],
    p90: Sequence[float],
) -> BandStats:
    """Score per-job predictions (one order; NaN: no prediction / no band).

    >>> b = band_stats([100, 10, 50], [90, 30, 50], [120, 10, 200], [50, 1, 60], [200, 5, 90])
    >>> b.band_coverage, b.share_off_2x, b.share_off_2x_expected
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    """
    jobs = band = inside = off = off_exp = 0
    for t, p, e, lo, hi in zip(true, predicted, expected, p10, p90, strict=True):
        if math.isnan(p):
            continue
        jobs += 1
        off += _off_2x(p, t)
        off_exp += _off_2x(e if not math.isnan(e) else p, t)
        if not (math.isnan(lo) or math.isnan(hi)):
            band += 1
            inside += lo <= t <= hi
    return BandStats(
        jobs=jobs,
        band_jobs=band,
        band_coverage=inside / band if band else math.nan,
        share_off_2x=off / jobs if jobs else math.nan,
        share_off_2x_expected=off_exp / jobs if jobs else math.nan,
    )


@dataclass
class QssfReport:
    jobs_total: int
    jobs_simulated: int
    jobs_without_gpus: int
    vc_sizes: dict[str, int]
    vc_sizing: dict[str, str]
    target_load: float
    predictions: OnlinePredictions
    policies: dict[str, PolicyResult]
    given: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    loop: Loop = "closed"
    band: BandStats | None = None  # the qssf policy's hints at submit vs true durations
    expected_start: dict[str, Any] | None = None  # the closed loop's forecasts vs its starts
    wait_bound: float | None = None  # the starvation bound's factor (closed loop; 0: off)
    overdue: int = 0  # waiting jobs the bound moved to the front (qssf, closed loop)
    overdue_easy: int | None = None  # the same in the closed-loop qssf+easy run, if any
    wait_bound_curve: list[BoundPoint] | None = None  # qssf at each factor, if asked

    def avg(self, name: str) -> float:
        return self.policies[name].summary.avg_jct_s

    def ratio(self, num: str, den: str) -> float | None:
        if num not in self.policies or den not in self.policies:
            return None
        d = self.avg(den)
        return self.avg(num) / d if d > 0 else None

    @property
    def curve_seconds(self) -> float | None:
        """Time of the extra runs of ``--wait-bound-curve`` (None: no curve)."""
        if not self.wait_bound_curve:
            return None
        return sum(p.seconds for p in self.wait_bound_curve)

    def _seconds(self) -> dict[str, float]:
        """``seconds``, with ``curve`` if there is one."""
        curve = self.curve_seconds
        return self.seconds if curve is None else {**self.seconds, "curve": curve}

    def as_dict(self) -> dict[str, Any]:
        p = self.predictions
        return {
            "jobs": self.jobs_total,
            "jobs_simulated": self.jobs_simulated,
            "jobs_without_gpus": self.jobs_without_gpus,
            "vc_sizes": dict(self.vc_sizes),
            "vc_sizing": dict(self.vc_sizing),
            "target_load": self.target_load,
            "gpus_per_node": GPUS_PER_NODE,
            "model": p.model,
            "model_version": p.model_version,
            "mae_log": p.mae_log,
            "median_abs_pct_error": p.median_abs_pct_error,
            "jobs_scored": p.scored,
            "policies": {name: r.as_dict() for name, r in self.policies.items()},
            "loop": self.loop,
            "hint_updates": p.hint_updates,
            "jct_ratio_fifo_over_qssf": self.ratio("fifo", "qssf"),
            "jct_ratio_qssf_over_fifo": self.ratio("qssf", "fifo"),
            "jct_ratio_qssf_over_sjf": self.ratio("qssf", "sjf"),
            "jct_ratio_qssf_over_oracle": self.ratio("qssf", "qssf-oracle"),
            "given_priorities": self.given,
            "seconds": {k: round(v, 3) for k, v in self._seconds().items()},
            # the qssf policy's hints as written at submit (band_coverage, band_jobs,
            # share_off_2x, share_off_2x_expected): top level, beside mae_log
            **(self.band.as_dict() if self.band is not None else BandStats.empty()),
            "expected_start": self.expected_start,
            "wait_bound": self.wait_bound,
            "overdue": self.overdue,
            "overdue_easy": self.overdue_easy,
            "wait_bound_curve": (
                curve_dicts(self.wait_bound_curve) if self.wait_bound_curve is not None else None
            ),
        }


def policy_specs(
    given: bool, backfill: bool, loop: Loop = "open", limits: bool = False
) -> list[PolicySpec]:
    specs = [
        PolicySpec("fifo", "fifo", "first in, first out"),
        PolicySpec("sjf", "sjf", "shortest true duration first (oracle)"),
        PolicySpec("srtf", "srtf", "shortest true remaining time first, preemptive (oracle)"),
        PolicySpec(
            "qssf-oracle", "qssf", "shortest true service (GPUs x duration) first", "oracle"
        ),
        PolicySpec(
            "qssf",
            "qssf",
            "QSSF with gpuhint's online hints"
            + (" (closed loop: learns and re-ranks in this schedule)" if loop == "closed" else ""),
            "loop" if loop == "closed" else "online",
        ),
    ]
    if given:
        specs.append(PolicySpec("qssf-given", "qssf", "QSSF with the given priorities", "given"))
    if limits:  # what a site can run without gpuhint: the users' requested time limits
        specs += [
            PolicySpec(
                "sjf-limit",
                "qssf",
                "shortest requested service first (GPUs x requested time limit)",
                "limit",
            ),
            PolicySpec(
                "fifo+easy",
                "fifo",
                "FIFO with EASY backfill on the requested time limits (Slurm's backfill)",
                easy=True,
            ),
        ]
    if backfill:
        specs += [
            PolicySpec(
                f"{s.name}+backfill", s.kind, f"{s.describe}, with backfill", s.priority, True
            )
            for s in list(specs)
            if s.kind != "srtf" and not s.easy
        ]
    closed = " (closed loop: its own hints and bound)" if loop == "closed" else ""
    if limits or backfill:  # what gpuhint adds to a site's backfill
        specs.append(
            PolicySpec(
                "qssf+easy",
                "qssf",
                "QSSF's hints with EASY backfill on gpuhint's p90 durations" + closed,
                "hint",
                easy=True,
                run_times="hint",
            )
        )
    if limits:  # gpuhint's priorities under the site's own backfill, as on Slurm
        specs.append(
            PolicySpec(
                "qssf+easy-limit",
                "qssf",
                "QSSF's hints with EASY backfill on the requested time limits" + closed,
                "hint",
                easy=True,
            )
        )
    return specs


def score_hints(
    jobs: Sequence[TraceJob], idx: Sequence[int], preds: OnlinePredictions
) -> BandStats:
    """The scheduled jobs' hints at submit (band, point forecast, the expected duration
    they ranked by) against their true durations."""

    def at(xs: list[float]) -> list[float]:
        return [xs[k] for k in idx] if xs else [math.nan] * len(idx)

    expected = (
        at(preds.submit_expected)
        if preds.submit_expected
        else [
            p / max(jobs[k].num_gpus, 1)
            for p, k in zip(at(preds.submit_priority), idx, strict=True)
        ]
    )
    return band_stats(
        [jobs[k].duration for k in idx],
        at(preds.predicted_duration),
        expected,
        at(preds.p10),
        at(preds.p90),
    )


def plot_jct_cdf(report: QssfReport, path: str | Path, title: str = "") -> Path:
    """Write a PNG of each policy's JCT CDF (log-scale time axis); return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, r in report.policies.items():
        xs = sorted(max(x, 1.0) for x in r.jct)
        n = len(xs)
        ys = [(i + 1) / n for i in range(n)]
        style = "--" if r.spec.backfill else "-"
        ax.step(xs, ys, style, where="post", label=f"{name} ({r.summary.avg_jct_s:,.0f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="policy (average JCT)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
