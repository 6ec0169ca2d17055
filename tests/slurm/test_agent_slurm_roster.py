"""On the real Slurm: jobs that ended while an agent without its watermark was down are
retired by the restarted agent's rosters (the worker's message path in-process)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.lab.local.slurm_site import sbatch, until
from gpuhint.slurm.commands import SlurmCli, SlurmCommandError
from gpuhint.slurm.feed import slurm_feed
from gpuhint.wire.contract import JobState
from tests.roster_worker import HandlerWorker

pytestmark = pytest.mark.integration

# squeue's jobs less the ended ones: an ended job is gone at once, as once Slurm's
# MinJobAge (squeue) or the agent's sacct window has passed during a long downtime.
# (Slurm 22.05's squeue --json ignores --states: the filter is done here.)
ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
FILTER = f"""
import json, subprocess, sys
snap = json.loads(subprocess.run(["squeue", "--all", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
snap["jobs"] = [j for j in snap["jobs"] if j["job_state"] not in {ENDED!r}]
json.dump(snap, sys.stdout)
"""


def _agent(transport: MemoryTransport, source: str) -> NodeAgent:
    feed = slurm_feed(source, cluster="test")  # no watermark: a restart starts fresh
    agent = NodeAgent(
        nvml=None,
        publisher=BufferedPublisher(transport),
        cluster="test",
        node="ctl",
        feeds=[feed],
        roster_every_s=1.0,
    )
    agent.start()
    return agent


def test_jobs_that_ended_while_the_agent_was_down_are_retired(
    slurm_conf: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_conf)
    script = tmp_path / "active_jobs.py"
    script.write_text(FILTER)
    source = f"cmd:{sys.executable} {script}"
    cli = SlurmCli(slurm_conf)
    # the two jobs that end unannounced are the only ones of their account (VC): after
    # the restart only Slurm's own list of accounts (sacctmgr) gets that VC a roster
    cli.run(["sacctmgr", "-i", "add", "account", "quiet"], check=False)
    cli.run(["sacctmgr", "-i", "add", "user", "root", "account=quiet"], check=False)
    quiet = ["--account", "quiet", "-G", "2", "-t", "5"]
    until("the new account to be usable", lambda: _submits(cli, quiet), 30, step=1.0)
    running = sbatch(cli, *quiet, "-J", "run", "--wrap", "sleep 300")
    held = sbatch(cli, *quiet, "-H", "-J", "held", "--wrap", "sleep 1")
    research = ["--account", "research", "-G", "2", "-t", "5"]
    stays = sbatch(cli, *research, "-H", "-J", "stays", "--wrap", "sleep 1")
    worker, transport = HandlerWorker(), MemoryTransport()
    agent = _agent(transport, source)

    def tick() -> None:
        agent.tick()
        worker.take(transport)

    until("the worker to see the job run", lambda: (tick(), worker.holds(running))[1], 60)
    until("... and the held ones wait", lambda: (tick(), worker.holds(stays))[1], 30)
    assert worker.holds(held)
    agent.close()  # the agent goes down, its tracker with it
    cli.run(["scancel", running, held])
    until("Slurm to stop listing them", lambda: "run" not in cli.run(["squeue", "-h"]), 60)
    agent = _agent(transport, source)  # restarted without a watermark: it never saw them end
    tick()
    assert worker.holds(running) and worker.holds(held)  # one roster: not yet
    time.sleep(1.1)
    tick()
    stats = worker.handler.engine.stats
    assert not worker.holds(running) and not worker.holds(held)  # their VC had no roster
    assert worker.holds(stays) and stats.retired == 2 and stats.learned == 0
    ces = worker.handler.ces
    assert ces is not None and ces.jobs is not None
    assert running not in ces.jobs.cluster("test").running  # its nodes freed for CES
    ends = {e.job_id: e for e in worker.ended if e.job_id in (running, held)}
    assert set(ends) == {running, held}  # announced to CES too
    assert {e.state for e in ends.values()} == {JobState.UNKNOWN}
    cli.run(["scancel", stays])
    agent.close()


def _submits(cli: SlurmCli, args: list[str]) -> bool:
    """Whether Slurm takes a job with ``args`` (held, then cancelled at once)."""
    try:
        job = sbatch(cli, *args, "-H", "-J", "probe", "--wrap", "true")
    except SlurmCommandError:
        return False
    cli.run(["scancel", job])
    return True
