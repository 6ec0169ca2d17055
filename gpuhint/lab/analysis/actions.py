"""What this cluster should do next, from an analysis's numbers (pure: dicts in, dicts out).

Each action is ``{"action", "why", "knob"}``. The rules, none tuned to one trace:

* **QSSF.** Worth enabling when the simulated average JCT is at least
  :data:`MIN_GAIN` times shorter than FIFO's. Its tails are judged against the targets
  of docs/qssf.md (longest wait at most :data:`MAX_WAIT_VS_FIFO` times FIFO's, at most
  :data:`MAX_SHARE_OVER_2X` of jobs finishing over 2x later than under FIFO): within
  them, the default starvation bound; beyond them, a stricter bound to try
  (:data:`STRICT_WAIT_BOUND`) once ``gpuhint evaluate qssf --wait-bound F`` has measured
  its cost in average JCT.
* **CES.** Worth enabling when powering idle nodes down saves at least
  :data:`MIN_SAVING_SHARE` of the all-on energy in the estimate from the jobs (or, with a
  load series, when nodes go off with shortfalls in at most
  :data:`MAX_SHORTFALL_SHARE` of the node-slots powered off).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuhint.lab.analysis.html_parts import vs_fifo
from models.wait_bound import DEFAULT_WAIT_BOUND

MIN_GAIN = 1.05
MAX_WAIT_VS_FIFO = 1.25
MAX_SHARE_OVER_2X = 0.01
STRICT_WAIT_BOUND = 8
MIN_SAVING_SHARE = 0.02
MAX_SHORTFALL_SHARE = 0.01

Action = dict[str, str]
FIFOS = "FIFO's"


def _h(s: float) -> str:
    return f"{s / 3600:,.1f} h"


def qssf_action(q: Mapping[str, Any] | None, note: str | None) -> Action:
    """Enable QSSF or not, and with which starvation bound."""
    if q is None:
        return {
            "action": "Measure QSSF before enabling it",
            "why": f"no QSSF what-if here: {note or 'no result'}",
            "knob": "gpuhint evaluate qssf --trace FILE (or gpuhint analyze without --no-qssf)",
        }
    # each rule judges the figure its why prints (rounded), so the two never disagree
    gain = q.get("jct_ratio_fifo_over_qssf") or 0.0
    if round(gain, 2) < MIN_GAIN:
        return {
            "action": "Keep the scheduler's own order (do not enable QSSF hints)",
            "why": (
                f"QSSF's average JCT is {vs_fifo(gain, FIFOS)} in the simulation (a gain "
                f"under {MIN_GAIN - 1:.0%} is not worth another moving part)"
            ),
            "knob": "none; re-run gpuhint analyze on a longer or busier period",
        }
    tails = q.get("tails") or {}
    fifo, qssf = tails.get("fifo") or {}, tails.get("qssf") or {}
    why = [f"average JCT {gain:.2f}x shorter than FIFO in the simulation"]
    bad = []
    fw, qw = fifo.get("max_wait_s"), qssf.get("max_wait_s")
    if fw and qw is not None and round(qw / fw, 2) > MAX_WAIT_VS_FIFO:
        bad.append(f"the longest wait is {_h(qw)} against FIFO's {_h(fw)} ({qw / fw:.2f}x)")
    over = qssf.get("share_jct_over_2x_fifo")
    if over is not None and round(over, 3) > MAX_SHARE_OVER_2X:
        bad.append(f"{over:.1%} of jobs finish over 2x later than under FIFO")
    if not bad:
        why.append(
            f"tails within the targets (longest wait <= {MAX_WAIT_VS_FIFO:g}x FIFO's, "
            f"<= {MAX_SHARE_OVER_2X:.0%} of jobs over 2x their FIFO JCT)"
        )
        return {
            "action": "Enable QSSF hints (gpuhint serve, or the worker and an applier)",
            "why": "; ".join(why),
            "knob": f"GPUHINT_QSSF_WAIT_BOUND={DEFAULT_WAIT_BOUND:g} (the default; 0 = off)",
        }
    return {
        "action": "Enable QSSF hints; if the longest waits matter more than the average, "
        "lower the starvation bound",
        "why": "; ".join(why + bad),
        "knob": (
            f"GPUHINT_QSSF_WAIT_BOUND (default {DEFAULT_WAIT_BOUND:g}): try {STRICT_WAIT_BOUND}, "
            "after measuring what it costs in average JCT: gpuhint evaluate qssf --trace FILE "
            f"--wait-bound {STRICT_WAIT_BOUND} (docs/qssf.md)"
        ),
    }


def _ces_from_jobs(c: Mapping[str, Any]) -> Action:
    base = c["all_on_energy_kwh"] or 0.0
    t, g = c["idle_timer"], c["gpuhint"]
    best = max(t["energy_saved_kwh"], g["energy_saved_kwh"])
    where = f"{c['jobs']:,} GPU jobs on {c['nodes']} nodes ({c['sized_by']}), {c['days']:,.0f} days"
    if base <= 0 or round(best / base, 3) < MIN_SAVING_SHARE:
        return {
            "action": "Leave node power saving off",
            "why": (
                f"simulated on {where}: powering idle nodes down saves at most "
                f"{best:,.0f} kWh ({best / base if base else 0:.1%} of all nodes on)"
            ),
            "knob": "none; gpuhint evaluate ces --trace FILE --nodes N with your pool size",
        }
    return {
        "action": "Power idle nodes down (CES)",
        "why": (
            f"simulated on {where}: Slurm's idle timer at SuspendTime=1 h saves "
            f"{t['energy_saved_kwh']:,.0f} kWh ({t['energy_saved_kwh'] / base:.1%} of all nodes "
            f"on) and adds {t['added_wait_avg_s']:,.0f} s to the average wait; gpuhint's "
            f"job-aware policy saves {g['energy_saved_kwh']:,.0f} kWh and adds "
            f"{g['added_wait_avg_s']:,.0f} s"
        ),
        "knob": (
            "slurm.conf SuspendTime=3600 with SuspendProgram/ResumeProgram (docs/ces.md, "
            "'What to put in slurm.conf'); for your boot time, watts and pool: gpuhint "
            "evaluate ces --trace FILE --nodes N"
        ),
    }


def _ces_from_series(c: Mapping[str, Any]) -> Action:
    short = c.get("shortfall_node_slots") or 0
    saved = c.get("energy_saved_kwh") or 0.0
    off = c.get("mean_powered_off") or 0.0
    off_slots = off * (c.get("n_slots") or 0)
    why = (
        f"replayed on the load series {c['series']}: {off:.1f} nodes off on average "
        f"(~{saved:,.0f} kWh), {short:,} shortfall node-slots"
    )
    if off_slots <= 0 or short > MAX_SHORTFALL_SHARE * off_slots:
        return {
            "action": "Do not let gpuhint power nodes down yet",
            "why": why
            + (
                " (nothing to save)"
                if off_slots <= 0
                else f" (over {MAX_SHORTFALL_SHARE:.0%} of the node-slots it powered off)"
            ),
            "knob": "keep the advice only (no gpuhint slurm apply-power); GPUHINT_CES_ENABLED",
        }
    return {
        "action": "Follow gpuhint's power advice (CES)",
        "why": why,
        "knob": "gpuhint slurm apply-power (docs/slurm.md); GPUHINT_CES_SLOT_S sets the slot",
    }


def ces_action(g: Mapping[str, Any]) -> Action:
    """Power idle nodes down or not, from the load series or the jobs."""
    if g.get("ces"):
        return _ces_from_series(g["ces"])
    if g.get("ces_jobs"):
        return _ces_from_jobs(g["ces_jobs"])
    return {
        "action": "Measure node power saving",
        "why": f"no CES estimate here: {g.get('ces_jobs_note') or g.get('ces_note')}",
        "knob": "gpuhint evaluate ces --trace FILE (jobs) or --series FILE (node counts)",
    }


def actions(n: Mapping[str, Any]) -> list[Action]:
    """The report's actions, QSSF first, then CES."""
    g = n["gpuhint"]
    return [qssf_action(g.get("qssf"), g.get("qssf_note")), ces_action(g)]
