"""``evaluate ces --trace``: the frontier of a job trace, its JSON keys and its rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cli import main

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"
POINT_KEYS = {
    "setting",
    "energy_saved_kwh",
    "node_hours_off",
    "added_wait_avg_s",
    "added_wait_p99_s",
    "jobs_delayed",
    "cycles_per_node_day",
}


def test_a_job_trace_gives_both_frontiers_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["evaluate", "ces", "--trace", str(TRACE), "--no-plot", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    timer, ours = d["frontier"]["idle_timer"], d["frontier"]["gpuhint"]
    assert timer and ours and set(d["default"]) >= POINT_KEYS
    assert all(set(p) >= POINT_KEYS for p in timer + ours)
    assert 3600 in [p["setting"] for p in timer]
    for p in timer + ours:  # powering nodes down saves energy, and never makes it negative
        assert p["energy_saved_kwh"] >= 0 and p["node_hours_off"] >= 0
        assert p["added_wait_avg_s"] >= 0 and p["cycles_per_node_day"] >= 0


def test_cycles_per_node_day_counts_the_power_downs_of_the_measured_days_only() -> None:
    # two nodes, horizon 0..1000 (first to last submit); c keeps node 1 busy to 8000; a
    # ends at 100 and node 0 goes down at 400; b (submitted at 1000) runs 1300..1400 and
    # node 0 goes down again at 1700, after the horizon: one power-down in 1000 s
    from gpuhint.lab.evaluation.ces_jobs import point
    from models.simulator import SimJob
    from models.simulator.power import AlwaysOn, PowerModel, simulate_power
    from models.simulator.power_policies import IdleTimer

    jobs = [SimJob("a", 0, 100, 8), SimJob("c", 0, 8000, 8), SimJob("b", 1000, 100, 8)]
    pm = PowerModel()
    base = simulate_power(jobs, 2, AlwaysOn(), power=pm)
    res = simulate_power(jobs, 2, IdleTimer(300), power=pm)
    assert res.power_downs == 2  # the whole run
    p = point(300, res, base, jobs, pm)
    days = 1000 / 86400
    assert p["cycles_per_node_day"] == pytest.approx(1 / 2 / days)
    assert p["max_cycles_per_node_day"] == pytest.approx(1 / days)
    assert p["node_hours_off"] == pytest.approx(600 / 3600)  # 400..1000
    assert p["added_wait_avg_s"] == pytest.approx(300 / 3) and p["jobs_delayed"] == 1
