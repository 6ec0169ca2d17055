"""``gpuhint serve`` alone on a real Slurm and a real Redis: jobs in, SiteFactor out."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuhint.redis.client import HintClient
from gpuhint.slurm.commands import SlurmCli
from gpuhint.slurm.priority import FactorMap

pytestmark = pytest.mark.integration


def _sbatch(cli: SlurmCli, *args: str) -> str:
    out = cli.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "gpu", *args])
    return out.strip().split(";")[0]


def _site_factors(cli: SlurmCli) -> dict[str, int]:
    out = cli.run(["sprio", "-h", "-o", "%i|%S"], check=False)
    return {a: int(b) for a, _, b in (ln.partition("|") for ln in out.split()) if b}


def _until(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def test_serve_alone_hints_and_applies_and_resumes(
    slurm_conf: str, redis_url: str, unique_prefix: str, tmp_path: Path
) -> None:
    cli = SlurmCli(slurm_conf)
    cluster = "s" + unique_prefix
    env = {
        **os.environ,
        "SLURM_CONF": slurm_conf,
        "GPUHINT_REDIS_URL": redis_url,
        "GPUHINT_KEY_PREFIX": unique_prefix,
        "GPUHINT_CLUSTER": cluster,
        "GPUHINT_STATE_DIR": str(tmp_path / "state"),
    }
    node = cli.nodes()[0].name
    common = ["-w", node, "-t", "5", "--account", "research"]
    blocker = _sbatch(cli, *common, "-G", "8", "-J", "blocker", "--wrap", "sleep 300")
    _until(
        "the blocker to run",
        lambda: "RUNNING" in cli.run(["squeue", "-h", "-j", blocker, "-o", "%T"]),
        60,
    )
    waiting = {g: _sbatch(cli, *common, "-G", str(g), "--wrap", "sleep 1") for g in (1, 2, 4, 8)}
    serve = [sys.executable, "-m", "gpuhint", "serve", "--once", "--json"]
    try:
        client = HintClient.from_url(redis_url, key_prefix=unique_prefix)
        hints: dict[str, object] = {}
        runs = []

        def hinted() -> bool:  # slurmdbd may list a new job a few seconds late: poll again
            run = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr[-3000:]
            runs.append(run)
            hints.update({h.job_id: h for h in client.pending_hints(cluster)})
            return set(waiting.values()) <= set(hints)

        _until("the waiting jobs' hints", hinted, 90)
        assert all(hints[j].vc == "research" for j in waiting.values())  # type: ignore[attr-defined]
        factors = _site_factors(cli)
        fmap = FactorMap()
        assert {j: factors[j] for j in waiting.values()} == {
            j: fmap.factor(hints[j].priority)  # type: ignore[attr-defined]
            for j in waiting.values()
        }
        doc = json.loads(runs[-1].stdout.splitlines()[-1])
        assert doc["pending_hinted"] >= len(waiting)
        # CES from sinfo: the cluster's power advice is in Redis, over every Slurm node
        advice = client.cluster_advice(cluster)
        assert advice is not None and advice.active_nodes <= len(cli.nodes()), advice

        db = tmp_path / "state" / f"serve-{cluster}.sqlite"
        logged = sqlite3.connect(db).execute("SELECT COUNT(*) FROM events").fetchone()[0]
        again = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
        relogged = sqlite3.connect(db).execute("SELECT COUNT(*) FROM events").fetchone()[0]
        assert relogged == logged, "a restart published the same transitions again"
        assert json.loads(again.stdout.splitlines()[-1])["updated"] == 0
    finally:
        cli.run(["scancel", blocker, *waiting.values()], check=False)
