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
