"""sinfo --json on the real Slurm: a running job's GPUs are busy, a powered-down node is off."""

from __future__ import annotations

import time

import pytest

from gpuhint.slurm.commands import SlurmCli
from gpuhint.slurm.nodes import SINFO_CMD, SlurmNodeFeed

pytestmark = pytest.mark.integration


def test_busy_gpus_and_power_state_from_the_real_sinfo(slurm_conf: str) -> None:
    cli = SlurmCli(slurm_conf)
    names = sorted(n.name for n in cli.nodes())
    busy, off = names[0], names[-1]
    job = cli.run(["sbatch", "--parsable", "-o", "/dev/null", "-w", busy, "-G", "3",
                   "--wrap", "sleep 300"]).strip()  # fmt: skip
    cli.run(["scontrol", "update", f"nodename={off}", "state=power_down_force"])
    feed = SlurmNodeFeed(("env", f"SLURM_CONF={slurm_conf}", *SINFO_CMD), cluster="c",
                         running_on=lambda n: [job] if n == busy else [])  # fmt: skip
    deadline = time.monotonic() + 90
    seen: dict[str, tuple[int, bool]] = {}
    while time.monotonic() < deadline:
        seen = {s.node: (s.busy_gpus, s.powered_on) for s in feed.poll(time.time())}
        if seen.get(busy) == (3, True) and seen.get(off) == (0, False):
            break
        time.sleep(1.0)
    assert seen.get(busy) == (3, True) and seen.get(off) == (0, False), seen
    assert set(seen) == set(names) and feed.failures == 0
