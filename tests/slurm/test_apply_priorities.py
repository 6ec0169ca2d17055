"""apply-priorities against a real slurmctld (sched/builtin) and a real Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhint.lab.local.slurm_site import SlurmSite, until
from gpuhint.redis.applier_status import read_passes
from gpuhint.redis.store import RedisStore
from gpuhint.slurm.commands import SlurmCli
from gpuhint.slurm.priority import FactorMap
from gpuhint.slurm.start_comment import Start, comment_text
from gpuhint.wire.contract import ExpectedStart, PriorityHint, StartForecasts
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def _hint(cluster: str, job_id: str, priority: float) -> PriorityHint:
    return PriorityHint(
        job_id=job_id, cluster=cluster, vc="research", num_gpus=8, submit_time=0.0,
        predicted_duration_s=priority / 8, priority=priority, model="test",
        model_version="1", created_at=time.time(),
    )  # fmt: skip


def test_start_order_follows_hints(
    slurm_conf: str, redis_url: str, unique_prefix: str, tmp_path: Path
) -> None:
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    node = cli.nodes()[0].name
    common = ["-w", node, "-G", "8", "-t", "5", "--account", "research"]
    blocker = site.sbatch(*common, "-J", "blocker", "--wrap", "sleep 300")
    until(
        "the blocker to run",
        lambda: "RUNNING" in cli.run(["squeue", "-h", "-j", blocker, "-o", "%T"]),
        60,
    )
    jobs = [site.sbatch(*common, "-J", f"j{i}", "--wrap", "sleep 2") for i in range(5)]
    pinned = site.sbatch(*common, "-J", "pinned", "--wrap", "sleep 1")
    cli.run(["scontrol", "update", f"jobid={pinned}", "Priority=7777"])  # an admin's pin
    # hints: the last submitted is the smallest; the pinned job and the blocker have hints too
    prios = {j: 100.0 * 8 ** (5 - i) for i, j in enumerate(jobs)}
    store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
    for j, p in {**prios, pinned: 1.0, blocker: 1.0}.items():
        store.put_hint(_hint(cluster, j, p))
    store.flush()

    gpuhint = [sys.executable, "-m", "gpuhint", "slurm", "apply-priorities"]
    dry = subprocess.run(
        [*gpuhint, "--once", "--dry-run"], env=env, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    fmap = FactorMap()
    want_lines = sorted(
        (f"scontrol update jobid={j} SiteFactor={fmap.factor(p)}" for j, p in prios.items()),
        key=lambda ln: -int(ln.rsplit("=", 1)[1]),
    )
    assert dry.stdout.splitlines() == want_lines
    assert all(v == 0 for k, v in site.site_factors().items() if k in jobs)  # dry: nothing set
    keys = RedisKeys(unique_prefix)
    assert read_passes(store.r, keys, cluster) == {}  # a dry run records no pass

    once = subprocess.run(
        [*gpuhint, "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)
    assert (doc["updated"], doc["skipped_pinned"], doc["refused"]) == (5, 1, 0)
    factors = site.site_factors()
    assert [factors[j] for j in jobs] == [fmap.factor(prios[j]) for j in jobs]
    assert factors[pinned] == 0  # pinned: never touched
    record = read_passes(store.r, keys, cluster)["slurm-priorities"]  # for `gpuhint status`
    assert record["ok"] is True and record["result"]["updated"] == 5
    config = tmp_path / "gpuhint.toml"  # the appliers' settings in the file
    config.write_text("slurm_rate = 100\n[slurm]\nmax_updates = 1000\n")
    again = subprocess.run(
        [*gpuhint, "--once", "--json", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["updated"] == 0  # only changed jobs

    # the daemon follows the change stream: an updated hint moves j0 (largest) to the front
    daemon = subprocess.Popen(
        [*gpuhint, "--interval", "600"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(2)
        store.put_hint(_hint(cluster, jobs[0], 10.0))
        store.flush()
        until("j0's new factor", lambda: site.site_factors().get(jobs[0]) == fmap.factor(10.0), 30)
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err

    cli.run(["scancel", blocker])
    until(
        "every job to finish",
        lambda: not cli.run(["squeue", "-h", "-j", ",".join([*jobs, pinned]), "-o", "%i"]).strip(),
        120,
    )
    acct = json.loads(cli.run(["sacct", "--json", "-X", "-j", ",".join(jobs)]))
    start = {str(j["job_id"]): j["time"]["start"] for j in acct["jobs"]}
    order = sorted(jobs, key=lambda j: (start[j], j))
    assert order == [jobs[0], jobs[4], jobs[3], jobs[2], jobs[1]]


def _stale_hint(cluster: str, job_id: str, priority: float, age_s: float) -> PriorityHint:
    return _hint(cluster, job_id, priority).model_copy(update={"created_at": time.time() - age_s})


def test_gpuhint_down_new_jobs_get_the_neutral_factor_and_stale_hints_fade(
    slurm_conf: str, redis_url: str, unique_prefix: str
) -> None:
    """The worker is down: earlier jobs have hints, the new ones none. The new ones must
    not rank below every hinted job (they get the median factor); once the hints are
    older than --stale-after, every pending job has the same factor: Slurm's own order."""
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    gpuhint = [sys.executable, "-m", "gpuhint", "slurm", "apply-priorities", "--once", "--json"]
    node = cli.nodes()[0].name
    common = ["-w", node, "-G", "8", "-t", "5", "--account", "research"]
    blocker = site.sbatch(*common, "-J", "blocker", "--wrap", "sleep 300")
    mine = [blocker]
    try:
        until(
            "the blocker to run",
            lambda: "RUNNING" in cli.run(["squeue", "-h", "-j", blocker, "-o", "%T"]),
            60,
        )
        old = [site.sbatch(*common, "-J", f"old{i}", "--wrap", "sleep 1") for i in range(3)]
        mine += old
        prios = dict(zip(old, (8 * 60.0, 8 * 3600.0, 8 * 30 * 86400.0), strict=True))
        store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
        for j, p in prios.items():
            store.put_hint(_hint(cluster, j, p))
        store.flush()
        # the worker dies: jobs submitted now get no hint
        new = [site.sbatch(*common, "-J", f"new{i}", "--wrap", "sleep 1") for i in range(2)]
        mine += new

        dead = subprocess.run(
            [*gpuhint, "--redis-url", "redis://127.0.0.1:9/0"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert dead.returncode != 0 and "pass failed" in dead.stderr  # Redis down:
        assert all(site.site_factors().get(j, 0) == 0 for j in old + new)  # nothing changed

        once = subprocess.run(gpuhint, env=env, capture_output=True, text=True, timeout=60)
        assert once.returncode == 0, once.stderr
        doc = json.loads(once.stdout)
        fmap = FactorMap()
        hinted = sorted(fmap.factor(p) for p in prios.values())
        neutral = round(hinted[1] / 1000) * 1000  # the median, to 1% of max_factor
        assert doc["neutral_factor"] == neutral and doc["pending_unhinted"] == 2
        assert doc["hints_fresh"] is True
        factors = site.site_factors()
        assert [factors[j] for j in old] == [fmap.factor(prios[j]) for j in old]
        assert [factors[j] for j in new] == [neutral, neutral]
        assert min(hinted) < neutral < max(hinted)  # not below every hinted job
        # and Slurm ranks them so: by priority, each new job is ahead of the largest
        prio = {
            a: int(b)
            for a, _, b in (
                ln.partition("|") for ln in cli.run(["squeue", "-h", "-o", "%i|%Q"]).split()
            )
        }
        assert all(prio[n] > prio[old[2]] and prio[n] < prio[old[0]] for n in new), prio

        # an hour and more without a sign of life: the hints fade; --fade 0: at once
        for j, p in prios.items():
            store.put_hint(_stale_hint(cluster, j, p, age_s=2 * 3600))
        store.flush()
        stale = subprocess.run(
            [*gpuhint, "--fade", "0"], env=env, capture_output=True, text=True, timeout=60
        )
        assert stale.returncode == 0, stale.stderr
        doc = json.loads(stale.stdout)
        assert doc["hints_fresh"] is False and doc["faded"] == 3, doc
        assert "no fresh hint" in stale.stderr
        factors = site.site_factors()
        assert {factors[j] for j in old + new} == {neutral}  # one factor: Slurm's own order

        # with the default fade (30 min) a hint 15 min past --stale-after is half-way
        half = subprocess.run(
            [*gpuhint, "--stale-after", str(2 * 3600 - 900)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert half.returncode == 0, half.stderr
        factors = site.site_factors()
        small = fmap.factor(prios[old[0]])
        assert neutral < factors[old[0]] < small, (factors[old[0]], neutral, small)
        assert factors[new[0]] == neutral
    finally:
        cli.run(["scancel", *mine], check=False)
        until(
            "my jobs to leave the queue",
            lambda: (
                not cli.run(["squeue", "-h", "-j", ",".join(mine), "-o", "%i"], check=False).strip()
            ),
            120,
        )


def _comments(cli: SlurmCli, jobs: list[str]) -> dict[str, str]:
    out = cli.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i|%k"])
    rows = (ln.partition("|") for ln in out.splitlines())
    return {a: ("" if b == "(null)" else b) for a, _, b in rows}


def test_expected_start_goes_into_the_comment_of_pending_jobs(
    slurm_conf: str, redis_url: str, unique_prefix: str
) -> None:
    site = SlurmSite(slurm_conf, redis_url, unique_prefix, "c")
    cli, cluster = site.cli, site.cluster
    env = site.env
    gpuhint = [sys.executable, "-m", "gpuhint", "slurm", "apply-priorities", "--once", "--json"]
    node = cli.nodes()[0].name
    common = ["-w", node, "-G", "8", "-t", "5", "--account", "research"]
    mine: list[str] = []
    try:
        mine.append(site.sbatch(*common, "-J", "blocker", "--wrap", "sleep 300"))
        until(
            "the blocker to run",
            lambda: "RUNNING" in cli.run(["squeue", "-h", "-j", mine[0], "-o", "%T"]),
            60,
        )
        plain = site.sbatch(*common, "-J", "plain", "--wrap", "sleep 1")
        mine.append(plain)
        noted = site.sbatch(*common, "-J", "noted", "--comment", "my own note", "--wrap", "sleep 1")
        mine.append(noted)
        old = site.sbatch(*common, "-J", "old", "--wrap", "sleep 1")  # no forecast any more
        mine.append(old)
        stale = "gpuhint:start=2026-01-01T00:00Z,band80=23:50Z..00:20Z,asof=2025-12-31T23:00Z"
        cli.run(["scontrol", "update", f"jobid={old}", f"Comment={stale}"])
        store = RedisStore.from_url(redis_url, keys=RedisKeys(unique_prefix))
        for j, p in {plain: 10.0, noted: 20.0, old: 30.0}.items():
            store.put_hint(_hint(cluster, j, p))
        now = time.time()
        forecast = {plain: Start(now + 600, now + 300, now + 1200, now - 60)}
        forecast[noted] = Start(now + 900, now + 600, now + 1800, now - 60)
        jobs = tuple(
            ExpectedStart(job_id=j, expected=s.expected, low=s.low, high=s.high)
            for j, s in forecast.items()
        )
        store.put_starts(StartForecasts(cluster=cluster, vc="research", time=now - 60, jobs=jobs))
        store.flush()
        want = comment_text(forecast[plain])

        dry = subprocess.run(
            [*gpuhint, "--dry-run"], env=env, capture_output=True, text=True, timeout=60
        )
        assert dry.returncode == 0, dry.stderr
        doc = json.loads(dry.stdout)
        assert f"scontrol update jobid={plain} Comment={want}" in doc["lines"]
        assert f"scontrol update jobid={old} Comment=" in doc["lines"]
        # (by its jobid= field: a bare job id such as "19" can be part of a time, T06:19Z)
        assert not any(f"jobid={noted} " in ln and "Comment" in ln for ln in doc["lines"])
        assert doc["start_comment"] is True
        got = {k: doc[k] for k in ("comments_set", "comments_cleared", "comments_user_kept")}
        assert got == {"comments_set": 1, "comments_cleared": 1, "comments_user_kept": 1}
        assert _comments(cli, [plain, old])[plain] == ""  # dry: nothing written

        once = subprocess.run(gpuhint, env=env, capture_output=True, text=True, timeout=60)
        assert once.returncode == 0, once.stderr
        doc = json.loads(once.stdout)
        assert (doc["comments_set"], doc["comments_refused"], doc["updated"]) == (1, 0, 3)
        assert _comments(cli, [plain, noted, old]) == {plain: want, noted: "my own note", old: ""}
        shown = cli.run(["scontrol", "show", "job", plain])
        assert f"Comment={want}" in shown

        again = subprocess.run(gpuhint, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        doc = json.loads(again.stdout)  # only changed texts are written
        assert (doc["comments_set"], doc["comments_cleared"], doc["comments_unchanged"]) == (
            0,
            0,
            1,
        )

        later = StartForecasts(
            cluster=cluster,
            vc="research",
            time=now,
            jobs=(
                ExpectedStart(job_id=plain, expected=now + 4000, low=now + 3000, high=now + 9000),
            ),
        )
        store.put_starts(later)
        store.flush()
        off = subprocess.run(
            [*gpuhint, "--no-start-comment"], env=env, capture_output=True, text=True, timeout=60
        )
        assert off.returncode == 0, off.stderr
        assert json.loads(off.stdout)["start_comment"] is False
        assert _comments(cli, [plain])[plain] == want  # opted out: left as it was
    finally:
        cli.run(["scancel", *mine], check=False)
        until(
            "my jobs to leave the queue",
            lambda: (
                not cli.run(["squeue", "-h", "-j", ",".join(mine), "-o", "%i"], check=False).strip()
            ),
            120,
        )
