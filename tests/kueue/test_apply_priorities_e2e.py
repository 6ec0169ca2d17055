"""``gpuhint kueue apply-priorities`` on a real API server with Kueue and a real Redis.

Four suspended Jobs of 8 GPUs wait on a 16-GPU ClusterQueue. The hints say the last is
the smallest: it is admitted first (with the oldest of the rest, FIFO among equals). A
hint update re-orders the waiting ones; admitted Workloads are never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from gpuhint.kueue.applier import Applier
from gpuhint.kueue.hints import hint_reader
from gpuhint.kueue.kube import KubeKueue, api_client
from gpuhint.kueue.policy import PRIORITY_CLASS_LABEL, SERVICE_LABEL, ClassLadder
from gpuhint.kueue.start_note import START_ANNOTATION, Start, notes_for
from gpuhint.lab.local.k8s import KueueEnv, wait_for
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ExpectedStart, PriorityHint, StartForecasts
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration
CLUSTER = "k8s"
LADDER = ClassLadder()
TOP = LADDER.at(LADDER.classes - 1)
BIG = 8 * 2 * 86400.0  # 8 GPUs for 2 days
SMALL = 8 * 60.0  # 8 GPUs for a minute


def _hint(job_id: str, vc: str, service: float) -> PriorityHint:
    return PriorityHint(
        job_id=job_id,
        cluster=CLUSTER,
        vc=vc,
        num_gpus=8,
        submit_time=time.time(),
        predicted_duration_s=service / 8,
        priority=service,
        model="test",
        model_version="1",
        created_at=time.time(),
    )


@pytest.fixture
def hints(redis_url: str, unique_prefix: str) -> Iterator[Callable[..., None]]:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))

    def put(vc: str, **services: float) -> None:
        for job_id, service in services.items():
            store.put_hint(_hint(job_id, vc, service))
        store.flush()

    yield put
    store.close()


def _priorities(env: KueueEnv) -> dict[str, int]:
    return {j: int(w["spec"].get("priority") or 0) for j, w in env.workloads().items()}


def _labels(env: KueueEnv, name: str) -> dict[str, str]:
    return dict(env.get_job(name)["metadata"].get("labels") or {})


def test_smallest_hint_is_admitted_first_and_admitted_workloads_are_untouched(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    hints: Callable[..., None],
    redis_url: str,
    unique_prefix: str,
) -> None:
    env = kueue_env(gpus=16, hold=True)
    ids = {f"j{i}": f"{env.id}-j{i}" for i in range(1, 5)}
    for n, (name, job_id) in enumerate(ids.items(), 1):
        env.job(name, gpus=8, job_id=job_id)
        # Kueue orders equals by their Workload's creation time (1-s resolution)
        wait_for(f"{n} Workloads", lambda n=n: len(env.workloads()) == n)  # type: ignore[misc]
        time.sleep(1.05)
    hints(env.cq, **{ids["j1"]: BIG, ids["j2"]: BIG, ids["j3"]: BIG, ids["j4"]: SMALL})

    backend = KubeKueue(api_client(kubeconfig))
    applier = Applier(
        backend, hint_reader(redis_url, unique_prefix), CLUSTER, LADDER, rate=0, workers=2
    )
    applier.ensure_classes()
    backend.sync()
    report = applier.run_pass()
    assert report.relabelled == 4 and report.errors == 0, report
    assert _labels(env, "j4")[PRIORITY_CLASS_LABEL] == TOP.name
    low = LADDER.class_for(BIG)
    assert {_labels(env, f"j{i}")[PRIORITY_CLASS_LABEL] for i in (1, 2, 3)} == {low.name}
    # Kueue carries the Job's class to the Workload's priority
    wait_for(
        "Workload priorities from the classes",
        lambda: _priorities(env) == {"j1": low.value, "j2": low.value, "j3": low.value,
                                     "j4": TOP.value},
    )  # fmt: skip
    backend.sync()
    assert applier.run_pass().relabelled == 0  # nothing changed: no patch

    env.release()
    wait_for("two admissions", lambda: len(env.admitted()) == 2)
    time.sleep(1.0)
    assert env.admitted() == {"j4", "j1"}  # FIFO alone would admit j1 and j2

    # admitted Workloads are never touched, whatever their hints say now
    before = {n: _labels(env, n) for n in ("j1", "j4")}
    prio_before = _priorities(env)
    hints(env.cq, **{ids["j1"]: SMALL / 2, ids["j4"]: BIG * 10})
    backend.sync()
    report = applier.run_pass()
    assert report.relabelled == 0 and report.skipped.get("admitted", 0) >= 2, report
    assert {n: _labels(env, n) for n in ("j1", "j4")} == before
    assert {k: _priorities(env)[k] for k in ("j1", "j4")} == {
        k: prio_before[k] for k in ("j1", "j4")
    }

    # a hint update re-orders the waiting ones: j3 (newer) now goes before j2, through
    # the daemon, which watches the cluster and re-reads the hints every interval
    daemon = subprocess.Popen(
        [
            sys.executable, "-m", "gpuhint", "kueue", "apply-priorities",
            "--kubeconfig", kubeconfig, "--cluster", CLUSTER, "--interval", "0.5", "--json",
        ],
        env={**os.environ, "GPUHINT_REDIS_URL": redis_url, "GPUHINT_KEY_PREFIX": unique_prefix},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        hints(env.cq, **{ids["j3"]: SMALL})
        wait_for(
            "the daemon to relabel j3",
            lambda: _labels(env, "j3").get(PRIORITY_CLASS_LABEL) == TOP.name,
            timeout_s=60,
        )
        assert _labels(env, "j2")[PRIORITY_CLASS_LABEL] == low.name
        wait_for("j3's Workload priority", lambda: _priorities(env)["j3"] == TOP.value)
        env.finish("j4")
        # Kueue may admit and then preempt on its way there: wait for where it settles
        wait_for("j3 admitted next to j1", lambda: env.admitted() == {"j1", "j3"}, timeout_s=60)
        time.sleep(1.0)
        assert env.admitted() == {"j1", "j3"}  # and it stays
        assert {n: _labels(env, n) for n in ("j1",)} == {"j1": before["j1"]}
    finally:
        daemon.terminate()
        out, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    passes = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert passes and sum(p["relabelled"] for p in passes) == 1, passes
    assert all(p["errors"] == 0 for p in passes)


def test_dry_run_changes_nothing_and_clear_undoes_a_pass(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    hints: Callable[..., None],
    redis_url: str,
    unique_prefix: str,
) -> None:
    env = kueue_env(gpus=16, hold=True)
    uid = env.job("a", gpus=8)  # no gpuhint.io/job-id label: the Job's UID links it
    env.job("b", gpus=8, job_id="not-hinted")
    wait_for("2 Workloads", lambda: len(env.workloads()) == 2)
    hints(env.cq, **{uid: SMALL})
    proc = subprocess.run(
        [
            sys.executable, "-m", "gpuhint", "kueue", "apply-priorities", "--once", "--dry-run",
            "--json", "--kubeconfig", kubeconfig, "--cluster", CLUSTER,
        ],
        env={**os.environ, "GPUHINT_REDIS_URL": redis_url, "GPUHINT_KEY_PREFIX": unique_prefix},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    mine = [p for p in report["planned"] if p["namespace"] == env.ns]
    # b has no hint: the neutral class, the median of the hinted (a alone here)
    assert report["neutral_class"] == TOP.name
    assert sorted((p["job"], p["to"], p["job_id"]) for p in mine) == [
        ("a", TOP.name, uid),
        ("b", TOP.name, "not-hinted"),
    ]
    assert report["dry_run"] is True and report["relabelled"] == 0
    assert PRIORITY_CLASS_LABEL not in _labels(env, "a")
    assert PRIORITY_CLASS_LABEL not in _labels(env, "b")

    def cli(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuhint", "kueue", "apply-priorities", *flags,
             "--kubeconfig", kubeconfig, "--cluster", CLUSTER],
            env={**os.environ, "GPUHINT_REDIS_URL": redis_url,
                 "GPUHINT_KEY_PREFIX": unique_prefix},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert cli("--once").returncode == 0
    assert _labels(env, "a")[PRIORITY_CLASS_LABEL] == TOP.name
    assert SERVICE_LABEL in _labels(env, "a")
    cleared = cli("--clear")
    assert cleared.returncode == 0, cleared.stderr
    wait_for("the class label to go", lambda: PRIORITY_CLASS_LABEL not in _labels(env, "a"))
    assert SERVICE_LABEL not in _labels(env, "a")  # gpuhint leaves no label behind
    wait_for("Kueue's default priority", lambda: _priorities(env)["a"] == 0)


def test_gpuhint_down_unhinted_workloads_get_the_neutral_class_and_stale_hints_fade(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    hints: Callable[..., None],
    redis_url: str,
    unique_prefix: str,
) -> None:
    """The worker is down: three Jobs have hints, two new ones none. The new ones get the
    neutral class (the median of the hinted), not Kueue's default 0 below every hinted
    one; once the hints are stale every waiting Workload is in that class."""
    env = kueue_env(gpus=16, hold=True)
    ids = {f"h{i}": f"{env.id}-h{i}" for i in range(3)}
    services = dict(zip(ids.values(), (SMALL, 8 * 3600.0, BIG), strict=True))
    for name, job_id in ids.items():
        env.job(name, gpus=8, job_id=job_id)
    for name in ("n0", "n1"):  # submitted while the worker is down: no hint
        env.job(name, gpus=8, job_id=f"{env.id}-{name}")
    wait_for("5 Workloads", lambda: len(env.workloads()) == 5)
    hints(env.cq, **services)

    backend = KubeKueue(api_client(kubeconfig))
    applier = Applier(
        backend, hint_reader(redis_url, unique_prefix), CLUSTER, LADDER, rate=0, workers=2
    )
    applier.ensure_classes()
    backend.sync()
    report = applier.run_pass()
    assert report.errors == 0 and report.hints_fresh, report
    rungs = sorted(LADDER.class_for(s).value - LADDER.base for s in services.values())
    neutral = LADDER.at(rungs[1])
    hinted = {n: LADDER.class_for(services[j]) for n, j in ids.items()}
    assert report.neutral_class == neutral.name
    assert _labels(env, "n0")[PRIORITY_CLASS_LABEL] == neutral.name
    assert _labels(env, "n1")[PRIORITY_CLASS_LABEL] == neutral.name
    assert _labels(env, "n0")["gpuhint.io/expected-service-gpu-s"] == "unknown"
    want = {**{n: c.value for n, c in hinted.items()}, "n0": neutral.value, "n1": neutral.value}
    wait_for("Kueue's Workload priorities", lambda: _priorities(env) == want)
    low, top = min(want.values()), max(want.values())
    assert low < neutral.value < top  # not below every hinted Workload

    # two hours without a sign of life (old hints, no load summary): the daemon's
    # one-shot pass fades every hint at once (--fade 0) to the neutral class
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    for job_id, s in services.items():
        h = _hint(job_id, env.cq, s).model_copy(update={"created_at": time.time() - 7200})
        store.put_hint(h)
    store.flush()
    store.close()
    proc = subprocess.run(
        [
            sys.executable, "-m", "gpuhint", "kueue", "apply-priorities", "--once", "--json",
            "--kubeconfig", kubeconfig, "--cluster", CLUSTER, "--fade", "0",
        ],
        env={**os.environ, "GPUHINT_REDIS_URL": redis_url, "GPUHINT_KEY_PREFIX": unique_prefix},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["hints_fresh"] is False and doc["neutral_class"] == neutral.name, doc
    assert "no fresh hint" in proc.stderr
    wait_for(
        "every waiting Workload in the neutral class",
        lambda: set(_priorities(env).values()) == {neutral.value},
    )


def _notes(env: KueueEnv, name: str) -> dict[str, str]:
    meta = env.workloads()[name]["metadata"]
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("gpuhint.io/")}


def test_waiting_workloads_are_annotated_with_their_expected_start(
    kubeconfig: str,
    kueue_env: Callable[..., KueueEnv],
    hints: Callable[..., None],
    redis_url: str,
    unique_prefix: str,
) -> None:
    env = kueue_env(gpus=16, hold=True)
    a, b = f"{env.id}-a", f"{env.id}-b"
    env.job("a", gpus=8, job_id=a)
    env.job("b", gpus=8, job_id=b)
    wait_for("2 Workloads", lambda: len(env.workloads()) == 2)
    hints(env.cq, **{a: SMALL, b: BIG})
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    now = time.time()

    def forecast(**starts: Start) -> None:
        jobs = tuple(
            ExpectedStart(job_id=j, expected=s.expected, low=s.low, high=s.high)
            for j, s in starts.items()
        )
        asof = next(iter(starts.values())).asof
        store.put_starts(StartForecasts(cluster=CLUSTER, vc=env.cq, time=asof, jobs=jobs))
        store.flush()

    first = Start(now + 600, now + 300, now + 1500, now)
    forecast(**{a: first})

    def cli(*flags: str) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuhint", "kueue", "apply-priorities", "--once", "--json",
             *flags, "--kubeconfig", kubeconfig, "--cluster", CLUSTER],
            env={**os.environ, "GPUHINT_REDIS_URL": redis_url,
                 "GPUHINT_KEY_PREFIX": unique_prefix},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out

    dry = cli("--dry-run")
    planned = [p for p in dry["planned_starts"] if p["namespace"] == env.ns]
    assert [(p["job_id"], p["annotations"]) for p in planned] == [(a, notes_for(first))]
    assert dry["expected_start"] is True and _notes(env, "a") == {}  # dry: nothing written

    done = cli()
    assert done["starts_annotated"] >= 1 and done["errors"] == 0, done
    assert _notes(env, "a") == notes_for(first) and _notes(env, "b") == {}
    again = cli()
    assert again["starts_annotated"] == 0 and again["starts_unchanged"] >= 1  # only changes

    later = Start(now + 7200, now + 3600, now + 9000, now + 60)
    forecast(**{b: later})  # b re-forecast, a no longer named: its annotations go
    moved = cli()
    assert moved["starts_cleared"] >= 1 and moved["starts_annotated"] >= 1
    assert _notes(env, "a") == {} and _notes(env, "b") == notes_for(later)
    assert _notes(env, "b")[START_ANNOTATION].endswith(":00Z")

    forecast(**{b: first})
    off = cli("--no-start-annotations")
    assert off["expected_start"] is False and _notes(env, "b") == notes_for(later)
    store.close()
