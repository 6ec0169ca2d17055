"""On the real API server with Kueue: a Job deleted while an agent without its watermark
was down is retired by the restarted agent's rosters (the worker's path in-process)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.lab.local.k8s import KueueEnv, wait_for
from gpuhint.wire.contract import JobState
from tests.roster_worker import HandlerWorker

pytestmark = pytest.mark.integration


def _agent(transport: MemoryTransport, kubeconfig: str) -> NodeAgent:
    from gpuhint.kueue.pods import kueue_feed

    agent = NodeAgent(
        nvml=None,
        publisher=BufferedPublisher(transport),
        cluster="k8s",
        node="ctl",
        feeds=[kueue_feed(cluster="k8s", kubeconfig=kubeconfig)],  # no watermark
        roster_every_s=1.0,
    )
    agent.start()
    # the roster identity tells clusters apart by the API server the kubeconfig names
    assert agent.feeds[0].snapshot.server.startswith("http")  # type: ignore[attr-defined]
    return agent


def test_a_job_deleted_while_the_agent_was_down_is_retired(
    kubeconfig: str, kueue_env: Callable[..., KueueEnv]
) -> None:
    env, other = kueue_env(gpus=8, hold=True), kueue_env(gpus=8, hold=True)
    gone, stays = f"{env.id}-gone", f"{other.id}-stays"
    env.job("gone", gpus=4, job_id=gone)  # alone in its ClusterQueue (VC): after the
    other.job("stays", gpus=4, job_id=stays)  # restart only its LocalQueue names that VC
    wait_for("the Workloads", lambda: len(env.workloads()) == len(other.workloads()) == 1)
    worker, transport = HandlerWorker(), MemoryTransport()
    agent = _agent(transport, kubeconfig)

    def tick() -> None:
        agent.tick()
        worker.take(transport)

    wait_for(
        "the worker to hold both", lambda: (tick(), worker.holds(gone))[1] and worker.holds(stays)
    )
    agent.close()  # down, and its tracker with it
    env.finish("gone")  # deleted while nobody watched
    # no controller-manager here to finish the deletion (the agent would list the Job,
    # terminating, as finished): its finalizers are dropped, as the Job controller does
    env.kube.request(
        "PATCH",
        f"/apis/batch/v1/namespaces/{env.ns}/jobs/gone",
        body={"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    wait_for("the Job gone", lambda: _deleted(env, "gone") and "gone" not in env.workloads())
    agent = _agent(transport, kubeconfig)  # restarted without a watermark
    tick()
    assert worker.holds(gone)  # one roster: not yet
    time.sleep(1.1)
    tick()
    assert not worker.holds(gone) and worker.holds(stays)
    (ended,) = [e for e in worker.ended if e.job_id == gone]
    assert ended.state is JobState.UNKNOWN and ended.vc == env.cq
    assert worker.handler.engine.stats.retired >= 1 and worker.handler.engine.stats.learned == 0
    agent.close()


def _deleted(env: KueueEnv, name: str) -> bool:
    """Whether the API no longer has the Job (a 404)."""
    from gpuhint.kueue.kube import KubeError

    try:
        env.get_job(name)
    except KubeError as exc:
        return exc.status == 404
    return False
