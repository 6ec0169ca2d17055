"""The agent's Kueue source on a real API server: Job/Workload events with the gpuhint id."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gpuhint.cores.job_tracker import JobTracker
from gpuhint.kueue.pods import KueueFeed, KueueSnapshot
from gpuhint.lab.local.k8s import KueueEnv, wait_for
from gpuhint.wire.contract import JobState, decode_message, encode_message

pytestmark = pytest.mark.integration


def test_kueue_jobs_become_job_events_with_the_gpuhint_id(
    kubeconfig: str, kueue_env: Callable[..., KueueEnv]
) -> None:
    env = kueue_env(gpus=8, hold=True)
    env.job("labelled", gpus=8, job_id=f"{env.id}-run-1")
    wait_for("its Workload", lambda: len(env.workloads()) == 1)
    time.sleep(1.05)  # the older goes first (creation times have 1-s resolution)
    uid = env.job("plain", gpus=4)
    wait_for("2 Workloads", lambda: len(env.workloads()) == 2)
    feed = KueueFeed(
        JobTracker(cluster="k8s", vanished_state=JobState.CANCELLED), KueueSnapshot(kubeconfig)
    )

    def mine(events: list) -> list:  # type: ignore[type-arg]
        return [e for e in events if e.job_id in (f"{env.id}-run-1", uid)]

    first = mine(feed.poll(time.time()))
    assert sorted((e.job_id, e.phase.value) for e in first) == sorted(
        [(f"{env.id}-run-1", "submitted"), (uid, "submitted")]
    )
    sub = {e.job_id: e for e in first}
    assert sub[uid].num_gpus == 4 and sub[f"{env.id}-run-1"].num_gpus == 8
    assert sub[uid].vc == env.cq  # the ClusterQueue behind the LocalQueue
    assert mine(feed.poll(time.time())) == []  # changes only

    env.release()  # 8 GPUs: the older, labelled one is admitted
    wait_for("an admission", lambda: env.admitted() == {"labelled"})
    started = mine(feed.poll(time.time()))
    assert [(e.job_id, e.phase.value) for e in started] == [(f"{env.id}-run-1", "started")]
    assert started[0].start_time is not None and started[0].vc == env.cq

    env.finish("labelled")  # deleted while running (no kubelet here to complete it)
    wait_for("the second admission", lambda: env.admitted() == {"plain"}, timeout_s=60)
    events = mine(feed.poll(time.time()))
    got = sorted((e.job_id, e.phase.value, e.state.value if e.state else None) for e in events)
    assert got == sorted([(f"{env.id}-run-1", "finished", "CANCELLED"), (uid, "started", None)])
    for e in first + started + events:
        assert decode_message(encode_message(e)) == e


def test_agent_cli_kueue_source_dry_run(
    kubeconfig: str, kueue_env: Callable[..., KueueEnv]
) -> None:
    import json
    import os
    import subprocess
    import sys

    env = kueue_env(gpus=8, hold=True)
    env.job("cli", gpus=8, job_id=f"{env.id}-cli")
    wait_for("its Workload", lambda: len(env.workloads()) == 1)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "agent", "--nvml", "none", "--kubernetes", "kueue",
         "--once", "--dry-run", "--cluster", "k8s"],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    msgs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    mine = [m["message"] for m in msgs if m["message"].get("job_id") == f"{env.id}-cli"]
    assert [(m["phase"], m["vc"], m["num_gpus"]) for m in mine] == [("submitted", env.cq, 8)]
