"""reset() and describe() on the real Slurm: a cluster left with jobs and a powered-off
node comes back to idle; describe() names the jobs' states and reasons."""

from __future__ import annotations

import pytest

from gpuhint.lab.local.slurm_tidy import describe, node_states, reset
from gpuhint.slurm.commands import SlurmCli

pytestmark = pytest.mark.integration


def test_reset_cancels_jobs_and_powers_nodes_back_up(slurm_conf: str) -> None:
    cli = SlurmCli(slurm_conf)
    last = sorted(node_states(slurm_conf))[-1]
    cli.run(["scontrol", "update", f"nodename={last}", "state=power_down_force"])
    sbatch = ["sbatch", "--parsable", "-o", "/dev/null", "-G", "8", "-t", "5"]
    jobs = [cli.run([*sbatch, "--wrap", "sleep 300"]).strip() for _ in range(6)]
    seen = describe(slurm_conf)
    assert jobs[-1] in seen and "PENDING" in seen
    assert reset(slurm_conf) is None
    assert set(node_states(slurm_conf).values()) == {"idle"}
    assert not cli.run(["squeue", "-h", "-o", "%i"]).strip()
