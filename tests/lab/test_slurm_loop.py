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
