"""The Kubernetes side of the applier (gpuhint/kueue/kube.py) against a scripted API
client: no API server needed (the real one is in test_apply_priorities_e2e.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gpuhint.kueue.kube import KubeApi, KubeKueue
from gpuhint.kueue.objects import job_ref, workload_ref
from gpuhint.kueue.policy import ClassLadder, QueuePolicy, plan

Handler = Callable[[str, str, dict[str, str], Any], tuple[int, Any]]


class _Resp:
    def __init__(self, status: int, doc: Any) -> None:
        self.status = status
        self._data = json.dumps(doc).encode()

    def read(self) -> bytes:
        return self._data


class FakeClient:
    """Enough of ``kubernetes.client.ApiClient`` for :class:`KubeApi`: each request goes
    to ``handler(method, path, query, body)`` -> (HTTP status, JSON document)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []

    def param_serialize(self, **kw: Any) -> tuple[Any, ...]:
        return (kw["method"], kw["resource_path"], dict(kw["query_params"]), kw["body"])

    def call_api(self, method: str, path: str, query: dict[str, str], body: Any,
                 _request_timeout: Any = None) -> _Resp:  # fmt: skip
        self.calls.append((method, path, query, body))
        return _Resp(*self.handler(method, path, query, body))


def _job(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid,
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}  # fmt: skip


def _workload(name: str, job_uid: str, prio: int, conds: list[str]) -> dict[str, Any]:
    admitted = "Admitted" in conds or "QuotaReserved" in conds
    return {
        "metadata": {"namespace": "ns", "name": f"job-{name}", "uid": f"w-{name}",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": name, "uid": job_uid}]},
        "spec": {"queueName": "lq", "priority": prio},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conds],
                   **({"admission": {"clusterQueue": "cq"}} if admitted else {})},
    }  # fmt: skip


def _cluster(*objs: tuple[dict[str, Any], dict[str, Any]]) -> KubeKueue:
    k = KubeKueue(FakeClient(lambda *_a: (500, {"message": "no API in this test"})))
    k.local_queues.items = {"ns/lq": "cq"}
    k.cluster_queues.items = {"cq": QueuePolicy("cq", within_cluster_queue="LowerPriority")}
    k.jobs.items = {f"ns/{j['metadata']['name']}": job_ref(j) for j, _w in objs}
    k.workloads.items = {f"ns/{w['metadata']['name']}": workload_ref(w) for _j, w in objs}
    return k


def test_a_finished_workload_does_not_cap_the_waiting_ones() -> None:
    """A finished Workload (kept while its Job exists, with its admission) holds no quota
    and cannot be preempted: it must not pull the preemption guard's ceiling down."""
    ladder = ClassLadder()
    k = _cluster(
        (_job("old", "u-old"), _workload("old", "u-old", 0, ["QuotaReserved", "Admitted",
                                                             "Finished"])),
        (_job("new", "u-new"), _workload("new", "u-new", 0, [])),
    )  # fmt: skip
    p = plan(k.views(), {"u-new": 60.0}, ladder, k.queues())
    assert p.skipped.get("preemption-guard") is None
    assert [r.new_class.name for r in p.relabel] == ["gpuhint-09"]


def test_a_running_workload_still_caps_the_waiting_ones() -> None:
    ladder = ClassLadder()
    k = _cluster(
        (_job("run", "u-run"), _workload("run", "u-run", 3, ["QuotaReserved", "Admitted"])),
        (_job("new", "u-new"), _workload("new", "u-new", 0, [])),
    )
    p = plan(k.views(), {"u-new": 60.0}, ladder, k.queues())
    assert [r.new_class.name for r in p.relabel] == ["gpuhint-02"]


def test_list_restarts_when_its_continue_token_expired() -> None:
    """A paged list whose continue token expired (HTTP 410 on a later page) starts over
    from the first page instead of failing the whole list."""
    state = {"expired": 1}

    def handler(method: str, path: str, q: dict[str, str], body: Any) -> tuple[int, Any]:
        if "continue" not in q:
            return 200, {"metadata": {"continue": "c1", "resourceVersion": "7"},
                         "items": [{"metadata": {"name": "a"}}]}  # fmt: skip
        if state["expired"]:
            state["expired"] -= 1
            return 410, {"kind": "Status", "code": 410, "reason": "Expired",
                         "message": "The provided continue parameter is too old"}  # fmt: skip
        return 200, {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "b"}}]}

    items, rv = KubeApi(FakeClient(handler)).list_all("/apis/batch/v1/jobs", page=1)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == "7"


def test_a_list_that_keeps_expiring_fails() -> None:
    def handler(method: str, path: str, q: dict[str, str], body: Any) -> tuple[int, Any]:
        if "continue" not in q:
            return 200, {"metadata": {"continue": "c1"}, "items": [{"metadata": {"name": "a"}}]}
        return 410, {"message": "The provided continue parameter is too old"}

    from gpuhint.kueue.kube import KubeError

    with pytest.raises(KubeError) as err:
        KubeApi(FakeClient(handler)).list_all("/apis/batch/v1/jobs", page=1)
    assert err.value.status == 410


def _patching_cluster(name: str, uid: str) -> KubeKueue:
    k = _cluster((_job(name, uid), _workload(name, uid, 0, [])))
    k.api = KubeApi(FakeClient(lambda *_a: (200, {"metadata": {"resourceVersion": "9"}})))
    return k


def test_a_written_class_counts_until_the_job_cache_shows_it() -> None:
    k = _patching_cluster("t", "u-1")
    assert k.relabel("ns", "t", "gpuhint-07", 100.0)
    assert [v.job_class for v in k.views()] == ["gpuhint-07"]  # watch lag: no second patch


def test_a_job_recreated_under_the_same_name_is_not_taken_for_the_one_relabelled() -> None:
    """Delete a labelled Job and create it again (same name, new UID, no label): the
    class written on the old one must not hide that the new one has none."""
    k = _patching_cluster("t", "u-1")
    assert k.relabel("ns", "t", "gpuhint-07", 100.0)
    again = _job("t", "u-2")
    k.jobs.items = {"ns/t": job_ref(again)}
    k.workloads.items = {"ns/job-t": workload_ref(_workload("t", "u-2", 0, []))}
    assert [v.job_class for v in k.views()] == [None]


def test_a_class_someone_else_set_after_gpuhints_patch_is_seen() -> None:
    """The cache shows a newer Job than the one patched, with an owner's own class: that
    class is the truth (a foreign class, left alone), not the one gpuhint wrote."""
    k = _patching_cluster("t", "u-1")
    assert k.relabel("ns", "t", "gpuhint-07", 100.0)
    newer = _job("t", "u-1")
    newer["metadata"]["resourceVersion"] = "12"
    newer["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    k.jobs.items = {"ns/t": job_ref(newer)}
    assert [v.job_class for v in k.views()] == ["urgent"]


def test_in_cluster_without_a_service_account_token_is_a_kube_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """In a pod without a mounted token (automountServiceAccountToken: false) the
    applier says what is missing, as for a bad kubeconfig, instead of a traceback."""
    from kubernetes.config import incluster_config

    from gpuhint.kueue.kube import KubeError, api_client

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    with pytest.raises(KubeError, match="in-cluster"):
        api_client()


class _Truncated(_Resp):
    """A body cut off by a connection reset (an API server restarting mid-answer)."""

    def read(self) -> bytes:
        return self._data[: len(self._data) // 2]


class _NoWait:
    def is_set(self) -> bool:
        return False

    def wait(self, _s: float) -> bool:
        return False


def test_a_list_cut_off_mid_body_is_retried_not_the_end_of_the_watch_thread() -> None:
    """The watch thread re-lists after an error; a list answer cut off mid-body must be
    an API error it retries, not an exception that ends the thread (the cache would
    then be frozen for good, silently)."""
    from gpuhint.kueue.kube import Reflector

    answers = [
        _Truncated(
            200,
            {
                "metadata": {"resourceVersion": "3"},
                "items": [{"metadata": {"name": f"j{i}"}} for i in range(9)],
            },
        )
    ]

    class Client(FakeClient):
        def call_api(self, *a: Any, **kw: Any) -> _Resp:
            if answers:
                return answers.pop()
            return _Resp(
                200, {"metadata": {"resourceVersion": "4"}, "items": [{"metadata": {"name": "j0"}}]}
            )

    r: Reflector[str] = Reflector(KubeApi(Client(lambda *_a: (500, {}))), "/x", lambda o: "v")
    r._relist_quietly(_NoWait())  # type: ignore[arg-type]
    assert r.items == {"j0": "v"} and r.resource_version == "4"
