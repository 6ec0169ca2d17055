"""The agent's roster identity: stable across restarts, distinct between schedulers."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.cores.job_roster import agent_identity
from gpuhint.cores.job_tracker import JobTracker, SchedulerFeed
from gpuhint.kueue.pods import KueueFeed, kueue_feed, pods_feed
from gpuhint.slurm.feed import slurm_feed
from gpuhint.wire.contract import JobRoster


def _agent(*feeds: SchedulerFeed, node: str = "ctl") -> NodeAgent:
    return NodeAgent(
        nvml=None,
        publisher=BufferedPublisher(MemoryTransport()),
        cluster="default",
        node=node,
        feeds=list(feeds),
    )


def _kueue(server: str) -> KueueFeed:
    """A Kueue feed whose snapshot reads the API server ``server`` (no request is made)."""
    return KueueFeed(JobTracker(cluster="default"), SimpleNamespace(server=server))  # type: ignore[arg-type]


def test_a_restart_with_the_same_node_name_and_feeds_keeps_the_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shipped Kueue agent is a Deployment: its host name is the pod's, new at every
    re-creation; its ``--node`` is not (review 2026-12-08)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "gpuhint-kueue-agent-6d4f9c7b8-x2k9p")
    before = _agent(_kueue("https://k8s.east:6443"), node="kueue-source").identity
    monkeypatch.setattr(socket, "gethostname", lambda: "gpuhint-kueue-agent-6d4f9c7b8-q7w3z")
    after = _agent(_kueue("https://k8s.east:6443"), node="kueue-source").identity
    assert before == after


def test_agents_of_two_kueue_clusters_on_one_host_differ() -> None:
    """Both under cluster name ``default``: what tells them apart is the API server their
    kubeconfig points at (review 2026-12-08: the source string is the constant 'kueue')."""
    east = _agent(_kueue("https://k8s.east:6443")).identity
    west = _agent(_kueue("https://k8s.west:6443")).identity
    assert east != west


def test_slurm_agents_differ_by_slurm_conf_and_vc_mapping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/a.conf")
    a = _agent(slurm_feed("squeue", cluster="default")).identity
    assert a == _agent(slurm_feed("squeue", cluster="default")).identity
    by_partition = _agent(slurm_feed("squeue", cluster="default", vc_from="partition")).identity
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/b.conf")
    b = _agent(slurm_feed("squeue", cluster="default")).identity
    assert len({a, by_partition, b}) == 3


def test_the_identity_is_a_valid_contract_name_whatever_the_node_name() -> None:
    for node in ("gpu-07", "odd node:1", "n" * 300, ""):
        JobRoster(epoch=0, agent=agent_identity(node, ["x"]))


def test_a_file_source_is_the_same_from_another_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "squeue.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    here = _agent(slurm_feed("squeue.json", cluster="default")).identity
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert _agent(slurm_feed("../squeue.json", cluster="default")).identity == here


# review 2026-12-08 ---------------------------------------------------------------
def test_file_source_identity_does_not_depend_on_the_file_existing_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """93ac770 makes a file source absolute only if it exists when the agent starts:
    an agent started before its (cron-written) file exists, then restarted after,
    changes identity with the same command line and working directory."""
    monkeypatch.chdir(tmp_path)
    before = _agent(slurm_feed("squeue.json", cluster="default")).identity
    (tmp_path / "squeue.json").write_text("{}")
    after = _agent(slurm_feed("squeue.json", cluster="default")).identity
    assert before == after


def test_builtin_slurm_source_identity_does_not_depend_on_cwd_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--slurm squeue`` runs squeue whatever the cwd holds, but a file named
    ``squeue`` in the working directory turns its identity into that file's path."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "squeue").write_text("")
    monkeypatch.chdir(tmp_path / "a")
    a = _agent(slurm_feed("squeue", cluster="default")).identity
    monkeypatch.chdir(tmp_path / "b")
    b = _agent(slurm_feed("squeue", cluster="default")).identity
    assert a == b


def test_kubectl_pods_agents_of_two_clusters_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--kubernetes kubectl`` reads whatever KUBECONFIG points at; the identity has
    SLURM_CONF for Slurm and the API server for Kueue, but nothing for kubectl: two
    pods agents of two clusters on one host are one agent to the worker."""
    monkeypatch.setenv("KUBECONFIG", "/etc/k8s/east.yaml")
    east = _agent(pods_feed("kubectl", cluster="default")).identity
    monkeypatch.setenv("KUBECONFIG", "/etc/k8s/west.yaml")
    west = _agent(pods_feed("kubectl", cluster="default")).identity
    assert east != west


def _in_cluster(tmp: Path, token: str, ca: str, monkeypatch: pytest.MonkeyPatch) -> str:
    import kubernetes.config.incluster_config as inc

    tmp.mkdir()
    (tmp / "token").write_text(token)
    (tmp / "ca.crt").write_text(ca)
    monkeypatch.setattr(inc, "SERVICE_TOKEN_FILENAME", str(tmp / "token"))
    monkeypatch.setattr(inc, "SERVICE_CERT_FILENAME", str(tmp / "ca.crt"))
    # the shipped deploy/k8s/kueue-agent.yaml: in-cluster, --node kueue-source
    return _agent(kueue_feed(cluster="default"), node="kueue-source").identity


def test_in_cluster_kueue_agents_of_two_clusters_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-cluster, the 'API server' is the kubernetes Service VIP (10.96.0.1:443 on
    every kubeadm cluster): two clusters' shipped Kueue agents get one identity."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    east = _in_cluster(tmp_path / "east", "tok-east", "CA-EAST", monkeypatch)
    west = _in_cluster(tmp_path / "west", "tok-west", "CA-WEST", monkeypatch)
    assert east != west
