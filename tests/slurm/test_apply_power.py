"""apply-power against a real slurmctld: nodes go idle~ and come back when jobs need them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhint.lab.local.slurm_site import SlurmSite, until
from gpuhint.redis.store import RedisStore
from gpuhint.slurm.commands import SlurmCli
from gpuhint.wire.contract import PowerAction, PowerAdvisory
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def _states(cli: SlurmCli) -> dict[str, str]:
    return {n.name: n.state for n in cli.nodes()}


def test_nodes_power_down_and_come_back(
    slurm_conf: str, redis_url: str, unique_prefix: str
) -> None:
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    names = sorted(_states(cli))
    total = len(names)
    busy_node = names[0]
    runner = cli.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "-w", busy_node, "-G", "1", "-t", "5",
         "--wrap", "sleep 600"]
    ).strip()  # fmt: skip
    until("a running job", lambda: _states(cli)[busy_node].startswith("mix"), 60)
    store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
    store.put_advisory(
        PowerAdvisory(cluster=cluster, time=time.time(), action=PowerAction.POWER_DOWN,
                      count=total, reason="test", active_nodes=0)
    )  # fmt: skip
    store.flush()
    cmd = [sys.executable, "-m", "gpuhint", "slurm", "apply-power", "--min-idle", "1"]
    need: list[str] = []
    try:
        dry = subprocess.run(
            [*cmd, "--once", "--dry-run"], env=env, capture_output=True, text=True, timeout=60
        )
        assert dry.returncode == 0, dry.stderr
        down = [n for n in reversed(names) if n != busy_node][: total - 2]
        assert dry.stdout.splitlines() == [
            f"scontrol update nodename={','.join(down)} state=power_down_asap"
        ]
        run = subprocess.run(
            [*cmd, "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)
        assert (
            doc["powered_down"] == down
            and doc["refused"] == 0
            and busy_node not in doc["powered_down"]
        )
        until("idle~ nodes", lambda: all(_states(cli)[n] == "idle~" for n in down), 90)
        assert _states(cli)[busy_node].startswith("mix")  # the running job's node stayed on
        # a second pass changes nothing: the idle buffer (1 node) is kept
        again = json.loads(
            subprocess.run(
                [*cmd, "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
            ).stdout
        )
        assert again["powered_down"] == [] and again["powered_up"] == []
        # jobs that need every node: Slurm resumes the powered-down ones itself
        sbatch = ["sbatch", "--parsable", "-o", "/dev/null", "-G", "8", "-t", "5"]
        need += [
            cli.run([*sbatch, "--exclude", busy_node, "--wrap", "sleep 1"]).strip()
            for _ in range(total - 1)
        ]
        until(
            "the jobs to run on resumed nodes",
            lambda: not cli.run(["squeue", "-h", "-j", ",".join(need), "-o", "%i"]).strip(),
            120,
        )
        assert not any(s.endswith("~") for s in _states(cli).values())
    finally:
        cli.run(["scancel", runner, *need], check=False)
        off = [n for n, s in _states(cli).items() if s[-1:] in "~%!"]
        if off:
            cli.run(
                ["scontrol", "update", f"nodename={','.join(off)}", "state=power_up"], check=False
            )
        until("every node idle again", lambda: all(s == "idle" for s in _states(cli).values()), 120)


def test_a_node_that_does_not_resume_is_reported_and_another_woken(
    slurm_conf: str, redis_url: str, unique_prefix: str
) -> None:
    """The launcher's ResumeProgram fails for a node with a ``run/resume-fails-NODE``
    file: the applier must stop counting on it and wake another node in its place."""
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    names = sorted(_states(cli))
    broken, spare = names[-2], names[-1]
    marker = Path(slurm_conf).resolve().parents[1] / "run" / f"resume-fails-{broken}"
    cli.run(["scontrol", "update", f"nodename={broken},{spare}", "state=power_down_asap"])
    until("two idle~ nodes", lambda: all(_states(cli)[n] == "idle~" for n in (broken, spare)), 90)
    marker.write_text("")
    store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
    store.put_advisory(
        PowerAdvisory(cluster=cluster, time=time.time(), action=PowerAction.KEEP,
                      count=0, reason="test", active_nodes=len(names) - 1)
    )  # fmt: skip
    store.flush()
    cmd = [sys.executable, "-m", "gpuhint", "slurm", "apply-power", "--json",
           "--interval", "2", "--resume-timeout", "12", "--min-idle", "0"]  # fmt: skip
    daemon = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    passes: list[dict] = []  # type: ignore[type-arg]
    try:
        assert daemon.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = daemon.stdout.readline()
            if not line:
                break
            passes.append(json.loads(line))
            if spare in passes[-1]["powered_up"]:
                break
        assert passes and passes[0]["powered_up"] == [broken], passes[:2]
        assert any(broken in p["resume_failed"] for p in passes)
        assert spare in passes[-1]["powered_up"], passes[-3:]
        until("the spare node up", lambda: _states(cli)[spare] == "idle", 60)
    finally:
        daemon.terminate()
        _, err = daemon.communicate(timeout=30)
        marker.unlink(missing_ok=True)
        cli.run(["scontrol", "update", f"nodename={broken}", "state=power_up"], check=False)
        cli.run(["scontrol", "update", f"nodename={broken}", "state=resume"], check=False)
        until("every node idle again", lambda: all(s == "idle" for s in _states(cli).values()), 120)
    assert f"node {broken} did not come back" in err


def test_per_node_advice_powers_down_the_named_nodes(
    slurm_conf: str, redis_url: str, unique_prefix: str
) -> None:
    """Advice with ``off_nodes`` (GPUHINT_CES_POLICY=jobs): exactly the named idle nodes go
    down (the count planner would take the highest-numbered ones), and a node no longer
    named comes back up."""
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    names = sorted(_states(cli))
    total = len(names)
    assert total >= 4
    store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
    cmd = [sys.executable, "-m", "gpuhint", "slurm", "apply-power", "--min-idle", "1"]

    def advise(off: list[str]) -> None:
        store.put_advisory(
            PowerAdvisory(cluster=cluster, time=time.time(), action=PowerAction.POWER_DOWN,
                          count=len(off), nodes=tuple(off), reason="test",
                          active_nodes=total - len(off), off_nodes=tuple(off))
        )  # fmt: skip
        store.flush()

    def one_pass() -> dict[str, object]:
        run = subprocess.run(
            [*cmd, "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        return dict(json.loads(run.stdout))

    try:
        off = names[:2]  # the lowest-numbered: never the count planner's choice
        advise(off)
        doc = one_pass()
        assert doc["powered_down"] == off and doc["powered_up"] == [] and doc["refused"] == 0
        until("the named nodes idle~", lambda: all(_states(cli)[n] == "idle~" for n in off), 90)
        assert all(not _states(cli)[n].endswith("~") for n in names[2:])
        advise(off[1:])  # the first one is wanted on again
        doc = one_pass()
        assert doc["powered_up"] == off[:1] and doc["powered_down"] == []
        until("the node back up", lambda: _states(cli)[off[0]] == "idle", 120)
        assert _states(cli)[off[1]] == "idle~"
    finally:
        down = [n for n, s in _states(cli).items() if s[-1:] in "~%!#"]
        if down:
            cli.run(
                ["scontrol", "update", f"nodename={','.join(down)}", "state=power_up"], check=False
            )
        until("every node idle again", lambda: all(s == "idle" for s in _states(cli).values()), 120)
