"""``gpuhint serve`` alone on a real Slurm and a real Redis: jobs in, SiteFactor out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhint.lab.local.slurm_site import SlurmSite, until
from gpuhint.redis.client import HintClient
from gpuhint.slurm.priority import FactorMap

pytestmark = pytest.mark.integration


def test_serve_alone_hints_and_applies_and_resumes(
    slurm_conf: str, redis_url: str, unique_prefix: str, tmp_path: Path
) -> None:
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "s")
    cli, cluster = site.cli, site.cluster
    env = {
        **site.env,
        "GPUHINT_STATE_DIR": str(tmp_path / "state"),
    }
    node = cli.nodes()[0].name
    common = ["-w", node, "-t", "5", "--account", "research"]
    blocker = site.sbatch(*common, "-G", "8", "-J", "blocker", "--wrap", "sleep 300")
    until(
        "the blocker to run",
        lambda: "RUNNING" in cli.run(["squeue", "-h", "-j", blocker, "-o", "%T"]),
        60,
    )
    waiting = {g: site.sbatch(*common, "-G", str(g), "--wrap", "sleep 1") for g in (1, 2, 4, 8)}
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

        until("the waiting jobs' hints", hinted, 90)
        assert all(hints[j].vc == "research" for j in waiting.values())  # type: ignore[attr-defined]
        factors = site.site_factors()
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
        logged = _end_offset(db)
        again = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
        relogged = _end_offset(db)
        assert relogged == logged, "a restart published the same transitions again"
        assert json.loads(again.stdout.splitlines()[-1])["updated"] == 0
    finally:
        cli.run(["scancel", blocker, *waiting.values()], check=False)


def _end_offset(db: Path) -> int:
    """How many events the log ever took (the log drops what it has committed)."""
    from gpuhint.serve.local_log import LocalLog

    log = LocalLog(db)
    try:
        return log.end_offset()
    finally:
        log.close()
