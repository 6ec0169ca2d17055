"""``gpuhint kueue apply-priorities`` around the applier: errors an operator sees."""

from __future__ import annotations

import pytest

from gpuhint.cli import kueue as cli_kueue
from gpuhint.cli import main
from gpuhint.kueue.kube import KubeError
from gpuhint.kueue.memory import InMemoryKueue


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
