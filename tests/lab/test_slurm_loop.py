"""``gpuhint evaluate slurm``: the closed loop, small (N = 30), on the session's services.

Asserts only that both runs complete and the JSON is whole; the benchmark figures
(N = 300, 8 nodes) are in docs/slurm.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhint.lab.slurm_loop import compress, default_speed, select_jobs
from gpuhint.lab.traces.readers import TraceJob, read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"


@pytest.mark.integration
def test_closed_loop_n30(
    slurm_conf: str, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    cmd = [
        sys.executable, "-m", "gpuhint", "evaluate", "slurm", "--trace", str(TRACE),
        "--jobs", "30", "--speed", "500000", "--json", "--slurm-conf", slurm_conf,
        "--bootstrap", kafka_bootstrap, "--redis-url", redis_url, "--timeout", "300",
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    for key in (
        "jobs",
        "speed",
        "nodes",
        "jct_ratio_slurm_over_gpuhint",
        "hints_applied",
        "seconds",
    ):
        assert key in doc, key
    assert doc["jobs"] == 30 and doc["speed"] == 500000 and doc["nodes"] >= 2
    for run in ("slurm", "gpuhint"):
        assert doc[run]["jobs"] == 30 and doc[run]["avg_jct_s"] > 0
    assert doc["simulated"]["jct_ratio_fifo_over_qssf"] > 0
    assert doc["hints_applied"] > 0  # gpuhint really was in the loop


def test_selection_and_compression() -> None:
    jobs = [
        TraceJob("a", 0.0, 100.0, 4),
        TraceJob("cpu", 1.0, 100.0, 0),
        TraceJob("huge", 2.0, 100.0, 64),
        TraceJob("b", 50.0, 1.0, 16),
    ]
    sel, too_big = select_jobs(jobs, 10, nodes=4)
    assert [j.job_id for j in sel] == ["a", "b"] and too_big == 1
    loop = compress(sel, speed=10.0)
    assert [(lj.at_s, lj.sleep_s, lj.nodes) for lj in loop] == [(0.0, 10.0, 1), (5.0, 1.0, 2)]
    assert default_speed(sel, 4) >= 1.0
    assert len(select_jobs(read_trace(TRACE).jobs, 30, 4)[0]) == 30


@pytest.mark.integration
def test_power_loop_small(kafka_bootstrap: str, redis_url: str) -> None:
    """--power: both runs on their own private Slurm complete, the JSON is whole, and the
    idle-timer run really powers nodes down (SuspendTime 3600 s / speed: under 1 s)."""
    cmd = [
        sys.executable, "-m", "gpuhint", "evaluate", "slurm", "--trace", str(TRACE),
        "--power", "--jobs", "12", "--nodes", "2", "--speed", "50000", "--json",
        "--bootstrap", kafka_bootstrap, "--redis-url", redis_url, "--timeout", "300",
    ]  # fmt: skip
    env = dict(os.environ)  # munged needs o+x on every directory above its socket
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["mode"] == "power" and doc["jobs"] == 12 and doc["nodes"] == 2
    keys = {"setting", "node_hours_off", "node_hours_booting", "power_ups", "avg_wait_s",
            "p99_wait_s", "avg_jct_s", "jobs"}  # fmt: skip
    for run in ("idle_timer", "gpuhint"):
        assert keys <= set(doc["power"][run]) and doc["power"][run]["jobs"] == 12, run
        assert {"node_hours_off", "avg_wait_s", "p99_wait_s"} <= set(doc["simulated_power"][run])
    timer = doc["power"]["idle_timer"]
    assert timer["node_hours_off"] > 0
    # the reference never powers a node down (its SuspendTime is not compressed), and the
    # other runs' waits are given against it
    assert doc["power"]["all_on"]["node_hours_off"] == 0
    assert doc["power"]["all_on"]["power_ups"] == 0
    for run in ("idle_timer", "gpuhint"):
        added = doc["power"][run]["avg_wait_s"] - doc["power"]["all_on"]["avg_wait_s"]
        assert doc["power"][run]["added_wait_avg_s"] == pytest.approx(added, abs=0.2)
        assert "added_wait_avg_s" in doc["simulated_power"][run]
        comp = doc["simulated_power_compressed"][run]
        lo, hi = comp["added_wait_range_s"]
        assert lo - 0.1 <= comp["added_wait_avg_s"] <= hi + 0.1
    assert doc["simulated_power_compressed"]["start_pass_s"] == 30 * doc["speed"]


def test_compressed_simulation_adds_slurms_start_pass_to_woken_jobs_only() -> None:
    """The all-on reference wakes nothing, so Slurm's start pass changes none of its
    starts; under the idle timer the pass only delays (jobs on woken nodes wait for it)."""
    from gpuhint.lab.slurm_power_loop import PowerSetup
    from gpuhint.lab.slurm_power_sim import simulated_power

    sel, _ = select_jobs(read_trace(TRACE).jobs, 40, 2)
    setup = PowerSetup(speed=60.0, suspend_time_s=600.0)
    loop = compress(sel, setup.speed)
    plain, comp = simulated_power(loop, 2, setup, "history_mix")
    assert comp["all_on"] == plain["all_on"]
    assert comp["start_pass_s"] == 1800.0
    assert plain["idle_timer"]["power_downs"] > 0
    lo, hi = comp["idle_timer"]["added_wait_range_s"]
    assert lo <= comp["idle_timer"]["added_wait_avg_s"] <= hi
    assert hi > plain["idle_timer"]["added_wait_avg_s"]


def test_power_runs_resolve_suspend_time() -> None:
    """Slurm's SuspendTime is whole wall seconds: --power's default speed keeps an hour at
    10 s or more, a faster speed is warned about, and the worker believes its advice for
    the feeds' and apply-power's interval plus a power-down (10 wall s), in trace seconds."""
    from gpuhint.lab.slurm_power_loop import PowerSetup, power_speed, suspend_rounding

    assert power_speed(22141.0, 3600.0) == 360.0 and power_speed(50.0, 3600.0) == 50.0
    fine = PowerSetup(speed=360.0)
    assert fine.suspend_wall_s == 10 and suspend_rounding(fine) is None
    coarse = PowerSetup(speed=22141.0)
    assert coarse.suspend_wall_s == 1
    warning = suspend_rounding(coarse)
    assert warning is not None and "22141 trace s" in warning and "--speed <= 360" in warning
    assert (
        PowerSetup(speed=360.0).confirm_s == 3600.0
        and coarse.confirm_s == 86400.0
        and PowerSetup(speed=10.0).confirm_s == 300.0
    )
    assert PowerSetup(speed=1.0).min_idle == 0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--slurm-conf", "/etc/slurm/slurm.conf"], "drop --slurm-conf"),
        (["--suspend-time", "0"], "--suspend-time must be > 0"),
        (["--boot", "-1"], "--boot >= 0"),
        (["--min-idle", "-1"], "--min-idle must be >= 0"),
    ],
)
def test_power_bad_args_are_one_line(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuhint.cli import main

    assert main(["evaluate", "slurm", "--trace", str(TRACE), "--power", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err, err
