"""``gpuhint serve --kueue`` on a real API server with Kueue and a real Redis: one process
reads the Jobs and Workloads, writes hints and labels the waiting Jobs; a restart
publishes no transition twice and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuhint.kueue.policy import PRIORITY_CLASS_LABEL
from gpuhint.lab.local.k8s import KueueEnv, wait_for
from gpuhint.redis.client import HintClient

pytestmark = pytest.mark.integration


def test_serve_alone_hints_and_labels_kueue_jobs_and_resumes(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    redis_url: str,
    unique_prefix: str,
    tmp_path: Path,
) -> None:
    kube = kueue_env(gpus=8, hold=True)
    names = [f"serve{i}" for i in range(3)]
    uids = [kube.job(name, gpus=8) for name in names]
    wait_for("3 Workloads", lambda: len(kube.workloads()) == 3)
    cluster = "k" + unique_prefix
    env = {
        **os.environ,
        "GPUHINT_REDIS_URL": redis_url,
        "GPUHINT_KEY_PREFIX": unique_prefix,
        "GPUHINT_CLUSTER": cluster,
        "GPUHINT_STATE_DIR": str(tmp_path / "state"),
    }
    serve = [
        sys.executable, "-m", "gpuhint", "serve", "--kueue", "--kubeconfig", kubeconfig,
        "--once", "--json",
    ]  # fmt: skip
    run = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    hints = {
        h.job_id: h
        for h in HintClient.from_url(redis_url, key_prefix=unique_prefix).pending_hints(cluster)
    }
    assert set(uids) <= set(hints), (uids, sorted(hints))
    assert {hints[u].vc for u in uids} == {kube.cq}
    for name in names:  # the waiting Jobs carry gpuhint's class
        labels = kube.get_job(name)["metadata"].get("labels") or {}
        assert labels.get(PRIORITY_CLASS_LABEL, "").startswith("gpuhint-"), (name, labels)
    doc = json.loads(run.stdout.splitlines()[-1])
    assert doc["relabelled"] >= len(names) and doc["errors"] == 0

    db = tmp_path / "state" / f"serve-{cluster}.sqlite"
    logged = _end_offset(db)
    assert logged >= len(names)
    again = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    relogged = _end_offset(db)
    assert relogged == logged, "a restart published the same transitions again"
    assert json.loads(again.stdout.splitlines()[-1])["relabelled"] == 0


def test_serve_kueue_refuses_apply_power(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpuhint", "serve", "--kueue", "--apply-power", "--once"],
        env={**os.environ, "GPUHINT_STATE_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--apply-power" in run.stderr and "--kueue" in run.stderr


def test_serve_kueue_daemon_labels_a_new_job_and_stops_on_sigterm(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    redis_url: str,
    unique_prefix: str,
    tmp_path: Path,
) -> None:
    """Without --once the applier's cache is kept by watches: a Job created while serve
    runs is hinted and labelled within a few passes."""
    import signal
    import time

    kube = kueue_env(gpus=8, hold=True)
    env = {
        **os.environ,
        "GPUHINT_REDIS_URL": redis_url,
        "GPUHINT_KEY_PREFIX": unique_prefix,
        "GPUHINT_CLUSTER": "d" + unique_prefix,
        "GPUHINT_STATE_DIR": str(tmp_path / "state"),
    }
    serve = [
        sys.executable, "-m", "gpuhint", "serve", "--kueue", "--kubeconfig", kubeconfig,
        "--poll", "1", "--apply-interval", "1",
    ]  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(serve, env=env, stdout=out, stderr=out)
    try:
        time.sleep(2)  # serving before the Job exists
        kube.job("late", gpus=8)

        def labelled() -> bool:
            labels = kube.get_job("late")["metadata"].get("labels") or {}
            return labels.get(PRIORITY_CLASS_LABEL, "").startswith("gpuhint-")

        wait_for("the new Job's class", labelled, timeout_s=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, log.read_text()[-3000:]


def _end_offset(db: Path) -> int:
    """How many events the log ever took (the log drops what it has committed)."""
    from gpuhint.serve.local_log import LocalLog

    log = LocalLog(db)
    try:
        return log.end_offset()
    finally:
        log.close()
