"""The project's own Slurm launcher: a real cluster with fake GPUs and accounting."""

from __future__ import annotations

import json
import time

import pytest

from gpuhint.lab.local.slurm import LocalSlurm
from gpuhint.slurm.commands import SlurmCli, _long_state

pytestmark = pytest.mark.integration


def test_cluster_has_gpu_nodes_and_accounting(slurm_conf: str) -> None:
    cli = SlurmCli(slurm_conf)
    nodes = cli.nodes()
    assert len(nodes) >= 2
    gres = cli.run(["sinfo", "-h", "-N", "-o", "%N %G"]).split()
    assert "gpu:8" in gres
    job = cli.run(
        ["sbatch", "--parsable", "-G", "2", "-t", "5", "-o", "/dev/null", "--wrap", "true"]
    )
    job_id = job.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = json.loads(cli.run(["sacct", "--json", "-X", "-j", job_id]))
        if doc["jobs"] and doc["jobs"][0]["state"]["current"] == "COMPLETED":
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job_id} did not complete in accounting")
    gpus = [t["count"] for t in doc["jobs"][0]["tres"]["allocated"] if t.get("name") == "gpu"]
    assert gpus == [2]


def test_launcher_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="nodes"):
        LocalSlurm(0)
    with pytest.raises(ValueError, match="sched"):
        LocalSlurm(2, sched="fifo")


def test_long_state_keeps_power_flags() -> None:
    assert _long_state("idle~") == "idle~"
    assert _long_state("alloc") == "allocated"
    assert _long_state("mix#") == "mixed#"
