"""``gpuhint agent --kubernetes ... --kubernetes-state FILE``: a restart publishes no
duplicate, and a Job or pod deleted while the agent was down is published finished."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpuhint.cli import main
from gpuhint.wire.contract import JobEvent, decode_message

PODS = Path(__file__).resolve().parents[1] / "data" / "kubernetes"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("GPUHINT_CONFIG", "GPUHINT_AGENT_INTERVAL_S", "GPUHINT_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(k, raising=False)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> list[tuple[str, str, str | None]]:
    """One ``--once --dry-run`` agent run; its job events as (id, phase, state)."""
    base = ["agent", "--nvml", "none", "--once", "--dry-run", "--cluster", "k8s"]
    assert main([*base, *argv]) == 0
    msgs = [decode_message(json.loads(x)["message"]) for x in capsys.readouterr().out.splitlines()]
    return [
        (m.job_id, m.phase.value, m.state.value if m.state else None)
        for m in msgs
        if isinstance(m, JobEvent)
    ]


def _ago(minutes: int) -> str:
    """A timestamp ``minutes`` before now (the agent polls at the real time)."""
    return (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, *, running: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "startTime": _ago(50)} if running else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": _ago(60)},
        "spec": {"nodeName": "gpu01" if running else None, "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": status or {"phase": "Pending"},
    }  # fmt: skip


def test_pods_feed_restart_no_duplicate_and_deleted_pod_cancelled(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods, state = tmp_path / "pods.json", tmp_path / "k8s-watermark.json"
    pods.write_text(
        json.dumps({"items": [_pod("train", running=True), _pod("wait", running=False)]})
    )
    flags = ["--kubernetes", str(pods), "--kubernetes-state", str(state)]
    assert sorted(_run(capsys, *flags)) == [
        ("ml/train", "started", None),
        ("ml/train", "submitted", None),
        ("ml/wait", "submitted", None),
    ]
    assert _run(capsys, *flags) == []  # restarted: nothing announced again
    pods.write_text(json.dumps({"items": [_pod("wait", running=False)]}))  # train deleted
    assert _run(capsys, *flags) == [("ml/train", "finished", "CANCELLED")]
    assert _run(capsys, *flags) == []


class _FakeSnapshot:
    jobs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        pass

    def read(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "workloads": [], "localqueues": []}


def _kueue_job(uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"job-{uid}", "namespace": "ml", "uid": uid,
                     "creationTimestamp": _ago(60),
                     "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": False, "template": {"spec": {
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        "status": {"startTime": _ago(50)},
    }  # fmt: skip


def test_kueue_feed_restart_no_duplicate_and_deleted_job_cancelled(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpuhint.kueue import pods

    monkeypatch.setattr(pods, "KueueSnapshot", _FakeSnapshot)
    monkeypatch.setattr(_FakeSnapshot, "jobs", [_kueue_job("u1"), _kueue_job("u2")])
    flags = ["--kubernetes", "kueue", "--kubernetes-state", str(tmp_path / "w.json")]
    assert len(_run(capsys, *flags)) == 4  # submitted and started, each
    assert _run(capsys, *flags) == []
    monkeypatch.setattr(_FakeSnapshot, "jobs", [_kueue_job("u2")])
    assert _run(capsys, *flags) == [("u1", "finished", "CANCELLED")]


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    assert main(["agent", "--nvml", "none", "--once", "--dry-run", "--cluster", "k8s", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuhint agent: error: ") and "\n" not in err, err
    assert "Traceback" not in err and all(n in err for n in needles), err


def test_a_bad_kubernetes_state_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods, state = tmp_path / "pods.json", tmp_path / "w.json"
    shutil.copy(PODS / "pods_1.json", pods)
    flags = ["--kubernetes", str(pods), "--kubernetes-state", str(state)]
    state.write_text("{damaged")
    _one_line_error(capsys, flags, "--kubernetes-state", str(state), "not a readable watermark")
    slurm = ["--slurm", str(PODS.parent / "slurm" / "squeue_1.json"), "--slurm-state", str(state)]
    state.unlink()
    _run(capsys, *slurm)  # a Slurm watermark of the same cluster
    _one_line_error(capsys, flags, str(state), "watermark of the slurm feed")
    state.unlink()
    _run(capsys, *flags)
    _one_line_error(capsys, [*flags, "--cluster", "other"], str(state), "cluster 'k8s'")
    _one_line_error(capsys, slurm, "--slurm-state", "watermark of the pods feed")
    _one_line_error(
        capsys, [*slurm[:2], "--kubernetes-state", str(state)], "--kubernetes-state needs"
    )


def test_help_teaches_kubernetes_state(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--kubernetes-state FILE" in out and "default: none" in out


def test_one_watermark_file_for_both_feeds_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Both feeds writing one file would overwrite each other every poll, and the next
    start would refuse it (another feed's watermark): refused at once instead."""
    pods, state = tmp_path / "pods.json", tmp_path / "w.json"
    shutil.copy(PODS / "pods_1.json", pods)
    slurm = str(PODS.parent / "slurm" / "squeue_1.json")
    flags = ["--slurm", slurm, "--slurm-state", str(state), "--kubernetes", str(pods)]
    _one_line_error(
        capsys, [*flags, "--kubernetes-state", str(tmp_path / "." / "w.json")], "same file"
    )
    assert not state.exists()
