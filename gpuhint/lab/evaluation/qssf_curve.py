"""The starvation bound along its knob: one closed-loop QSSF run per factor, each point
its average JCT and its tails against FIFO's (``gpuhint evaluate qssf
--wait-bound-curve``; docs/qssf.md, "The trade-off curve"). An operator reads it on
their own trace to choose ``GPUHINT_QSSF_WAIT_BOUND``: how much average JCT each step
towards FIFO's longest wait costs there.

>>> from models.simulator.metrics import Tails
>>> fifo = Tails(100.0, 50.0, 3.0, 0.0, 0.0)
>>> off = BoundPoint(0, 1000.0, Tails(300.0, 60.0, 9.0, 0.05, 0.01), 0, fifo)
>>> strict = BoundPoint(1, 1200.0, Tails(110.0, 55.0, 5.0, 0.01, 0.0), 40, fifo)
>>> d = strict.as_dict(off)
>>> d["avg_jct_change"], d["max_wait_over_fifo"], d["p99_wait_over_fifo"]
(0.2, 1.1, 1.1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.simulator.metrics import Tails

DEFAULT_CURVE: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0)
"""The factors ``--wait-bound-curve`` runs when given none: off, then strict to loose."""


@dataclass(frozen=True)
class BoundPoint:
    """One factor's closed-loop QSSF run (``factor`` 0: the bound off)."""

    factor: float
    avg_jct_s: float
    tails: Tails
    overdue: int
    fifo: Tails
    seconds: float = 0.0
    """Time this point's run took (0 for the run the report made anyway, reused)."""

    def as_dict(self, off: BoundPoint | None) -> dict[str, Any]:
        """The point's figures; ``avg_jct_change`` against ``off`` (None: no such run)."""
        change = (
            self.avg_jct_s / off.avg_jct_s - 1 if off is not None and off.avg_jct_s > 0 else None
        )
        return {
            "factor": self.factor,
            "avg_jct_s": self.avg_jct_s,
            "avg_jct_change": None if change is None else round(change, 6),
            **self.tails.as_dict(),
            "max_wait_over_fifo": _ratio(self.tails.max_wait_s, self.fifo.max_wait_s),
            "p99_wait_over_fifo": _ratio(self.tails.p99_wait_s, self.fifo.p99_wait_s),
            "overdue": self.overdue,
        }


def _ratio(x: float, fifo: float) -> float | None:
    return round(x / fifo, 6) if fifo > 0 and math.isfinite(x) else None


def off_point(points: Sequence[BoundPoint]) -> BoundPoint | None:
    """The run with the bound off (factor 0), the reference of every change."""
    return next((p for p in points if p.factor == 0), None)


def curve_dicts(points: Sequence[BoundPoint]) -> list[dict[str, Any]]:
    off = off_point(points)
    return [p.as_dict(off) for p in points]


def parse_factors(text: str) -> tuple[float, ...]:
    """``"1,2,4"`` -> the factors, with 0 (the bound off: the reference) added first.

    >>> parse_factors("4, 1,2")
    (0.0, 1.0, 2.0, 4.0)
    """
    try:
        values = {float(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise ValueError(f"expected factors like 1,2,4,16, got {text!r}") from None
    bad = [v for v in values if not (v >= 0 and math.isfinite(v))]
    if bad or not values:
        raise ValueError(f"factors must be finite numbers >= 0, got {text!r}")
    return tuple(sorted(values | {0.0}))


def plot_bound_curve(points: Sequence[BoundPoint], path: str | Path, title: str = "") -> Path:
    """A PNG of the curve: average JCT change against the longest and p99 waits over
    FIFO's, one point per factor (labelled), from strict to off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [d for d in curve_dicts(points) if d["avg_jct_change"] is not None]
    rows.sort(key=lambda d: (d["factor"] == 0, d["factor"]))  # strict to loose, then off
    fig, ax = plt.subplots(figsize=(6.5, 4.5), dpi=120)
    xs = [100 * d["avg_jct_change"] for d in rows]
    for key, style, label in (
        ("max_wait_over_fifo", "o-", "longest wait"),
        ("p99_wait_over_fifo", "s--", "p99 wait"),
    ):
        ys = [d[key] if d[key] is not None else math.nan for d in rows]
        ax.plot(xs, ys, style, label=label)
        names: dict[tuple[float, float], list[str]] = {}
        for d, x, y in zip(rows, xs, ys, strict=True):  # one label per spot
            names.setdefault((x, y), []).append("off" if d["factor"] == 0 else f"{d['factor']:g}")
        for (x, y), ns in names.items():
            ax.annotate(
                ", ".join(ns), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points"
            )
    ax.axhline(1.0, color="grey", lw=0.8, ls=":", label="FIFO's (same wait)")
    ax.set_xlabel("average JCT change against the bound off (%)")
    ax.set_ylabel("wait / FIFO's (longest, p99)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "starvation bound: factor (labels) from off to strict", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
