"""``gpuhint kueue apply-priorities`` around the applier: errors an operator sees."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from gpuhint.cli import kueue as cli_kueue
from gpuhint.cli import main
from gpuhint.kueue.hints import MemoryHints
from gpuhint.kueue.kube import KubeError
from gpuhint.kueue.memory import InMemoryKueue, UnreachableAtFirst
from gpuhint.wire.contract import PriorityHint


def _hint(job_id: str) -> PriorityHint:
    return PriorityHint(
        job_id=job_id,
        cluster="c",
        num_gpus=1,
        submit_time=0,
        predicted_duration_s=60,
        priority=60,
        model="m",
        model_version="1",
        created_at=time.time(),
    )


class _Down(InMemoryKueue):
    def sync(self) -> None:
        raise KubeError(0, "GET /apis/kueue.x-k8s.io/v1beta2/workloads: connection refused")


class _Forbidden(InMemoryKueue):
    def sync(self) -> None:
        pass

    def unlabel(self, namespace: str, job: str) -> bool:
        if job == "a":
            raise KubeError(403, f"PATCH jobs/{job}: forbidden")
        return super().unlabel(namespace, job)


def test_clear_with_the_api_down_is_an_error_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_kueue, "_backend", lambda _ks: _Down())
    assert main(["kueue", "apply-priorities", "--clear"]) == 2
    assert "Kubernetes API" in capsys.readouterr().err


def test_clear_goes_on_past_a_refused_job_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    k = _Forbidden()
    for name in ("a", "b"):
        k.add_job("ns", name, job_id=name, job_class="gpuhint-05")
    monkeypatch.setattr(cli_kueue, "_backend", lambda _ks: k)
    assert main(["kueue", "apply-priorities", "--clear"]) == 1
    assert k.jobs["ns/b"].job_class is None  # the one after the refused one is cleared
    err = capsys.readouterr().err
    assert "cleared gpuhint's class on 1 waiting Job(s)" in err and "1 failed" in err


class _Records(list[dict[str, Any]]):
    """A stand-in for redis.Redis where the pass records go: each one written."""

    def set(self, key: str, value: str, ex: int | None = None) -> None:
        self.append(json.loads(value))


class _BootsDown(UnreachableAtFirst):
    """An API server down for the daemon's first ``down`` calls to it, then up: the
    daemon stops itself (SIGTERM) once a pass has relabelled the Job."""

    def wait_change(self, timeout_s: float) -> bool:
        if self.jobs["ns/a"].job_class is not None:
            signal.raise_signal(signal.SIGTERM)
        return False


def test_the_daemon_started_while_the_api_server_is_down_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Down at start is an outage like any other: logged, recorded for ``gpuhint status``
    and retried (exit 2 would not be restarted by a unit with RestartPreventExitStatus=2,
    and told nobody on /metrics); once up, the classes are made and the Job relabelled."""
    import gpuhint.kueue.hints as kueue_hints

    k = _BootsDown(down=2)
    k.add_job("ns", "a", job_id="j1")
    hints = MemoryHints({"j1": _hint("j1")})
    hints.r = _Records()  # type: ignore[attr-defined]
    monkeypatch.setattr(cli_kueue, "_backend", lambda _ks: k)
    monkeypatch.setattr(kueue_hints, "hint_reader", lambda _url, _prefix: hints)
    args = ["kueue", "apply-priorities", "--cluster", "c", "--interval", "0.01"]
    assert main(args) == 0
    assert k.jobs["ns/a"].job_class is not None and k.classes and k.watches == 1
    assert "pass failed, retrying" in caplog.text
    oks = [rec["ok"] for rec in hints.r]  # type: ignore[attr-defined]
    assert oks[:2] == [False, False] and oks[-1] is True  # for `gpuhint status`
