"""The report's actions follow rules on the numbers, never one trace's constants."""

from __future__ import annotations

from typing import Any

from gpuhint.lab.analysis import actions


def _q(gain: float, qssf_wait: float, over2: float) -> dict[str, Any]:
    return {
        "jct_ratio_fifo_over_qssf": gain,
        "tails": {
            "fifo": {"max_wait_s": 10 * 3600.0, "share_jct_over_2x_fifo": 0.0},
            "qssf": {"max_wait_s": qssf_wait, "share_jct_over_2x_fifo": over2},
        },
    }


def _ces_jobs(saved_timer: float, saved_gh: float, base: float = 1000.0) -> dict[str, Any]:
    return {
        "jobs": 100,
        "nodes": 4,
        "sized_by": "target load 0.5",
        "days": 3.0,
        "all_on_energy_kwh": base,
        "idle_timer": {"setting": 3600, "energy_saved_kwh": saved_timer, "added_wait_avg_s": 90.0},
        "gpuhint": {"setting": 0.98, "energy_saved_kwh": saved_gh, "added_wait_avg_s": 30.0},
    }


def test_every_action_has_the_three_keys() -> None:
    n = {"gpuhint": {"qssf": _q(1.5, 3600.0, 0.0), "ces_jobs": _ces_jobs(100.0, 90.0)}}
    got = actions.actions(n)
    assert len(got) == 2
    assert all(set(a) == {"action", "why", "knob"} and all(a.values()) for a in got)


def test_qssf_enable_keep_or_tighten() -> None:
    ok = actions.qssf_action(_q(1.5, 11 * 3600.0, 0.005), None)
    assert ok["action"].startswith("Enable QSSF hints (") and "=16" in ok["knob"]
    assert "1.50x shorter" in ok["why"]
    small = actions.qssf_action(_q(1.03, 3600.0, 0.0), None)
    assert small["action"].startswith("Keep the scheduler's own order")
    assert "1.03x shorter than FIFO's" in small["why"]
    worse = actions.qssf_action(_q(0.8, 3600.0, 0.0), None)  # QSSF loses: said so
    assert worse["action"] == small["action"] and "1.25x longer than FIFO's" in worse["why"]
    long_wait = actions.qssf_action(_q(1.5, 30 * 3600.0, 0.0), None)
    assert "lower the starvation bound" in long_wait["action"]
    assert "GPUHINT_QSSF_WAIT_BOUND" in long_wait["knob"] and "--wait-bound 8" in long_wait["knob"]
    assert "30.0 h against FIFO's 10.0 h (3.00x)" in long_wait["why"]
    late = actions.qssf_action(_q(1.5, 3600.0, 0.05), None)
    assert "5.0% of jobs finish over 2x later" in late["why"]
    missing = actions.qssf_action(None, "not run (--no-qssf)")
    assert "--no-qssf" in missing["why"] and "evaluate qssf" in missing["knob"]


def test_ces_from_jobs_or_series() -> None:
    on = actions.ces_action({"ces_jobs": _ces_jobs(150.0, 120.0)})
    assert on["action"] == "Power idle nodes down (CES)"
    assert "150 kWh (15.0% of all nodes on)" in on["why"] and "SuspendTime=3600" in on["knob"]
    off = actions.ces_action({"ces_jobs": _ces_jobs(5.0, 10.0)})  # 1% of the energy at best
    assert off["action"] == "Leave node power saving off"
    series = {
        "series": "earth",
        "mean_powered_off": 4.0,
        "n_slots": 100,
        "energy_saved_kwh": 50.0,
        "shortfall_node_slots": 1,
    }
    assert actions.ces_action({"ces": series})["action"].startswith("Follow gpuhint's")
    short = actions.ces_action({"ces": {**series, "shortfall_node_slots": 40}})
    assert short["action"].startswith("Do not let gpuhint power nodes down")
    none = actions.ces_action({"ces_jobs_note": "not run (--no-ces)", "ces_note": "x"})
    assert "--no-ces" in none["why"] and "evaluate ces" in none["knob"]


def test_an_action_never_contradicts_the_rounded_figure_it_cites() -> None:
    """On a threshold's edge the decision follows the figure the why prints: "1.05x
    shorter" is not "a gain under 5%", "(1.25x)" is within "at most 1.25x", "1.0% of
    jobs" is within "at most 1%", "2.0% of all nodes on" is not under 2%."""
    edge = actions.qssf_action(_q(1.0496, 3600.0, 0.0), None)
    assert "1.05x shorter" in edge["why"] and edge["action"].startswith("Enable QSSF hints (")
    wait = actions.qssf_action(_q(1.5, 1.2549 * 10 * 3600.0, 0.0), None)
    assert wait["action"].startswith("Enable QSSF hints ("), wait["why"]
    late = actions.qssf_action(_q(1.5, 3600.0, 0.01049), None)
    assert late["action"].startswith("Enable QSSF hints ("), late["why"]
    ces = actions.ces_action({"ces_jobs": _ces_jobs(19.96, 10.0)})  # 1.996% of 1,000 kWh
    assert ces["action"] == "Power idle nodes down (CES)", ces["why"]
