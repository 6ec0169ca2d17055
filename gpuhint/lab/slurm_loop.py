"""``gpuhint evaluate slurm``: a trace replayed into a real Slurm, with and without gpuhint.

The first N GPU jobs of a trace become ``sleep`` jobs, compressed ``speed`` times
(durations and inter-arrival times divided by ``speed``; a job sleeps at least 1 s).
They are submitted at their (compressed) arrival times twice, to the same cluster:

1. **slurm**: Slurm's own order (every SiteFactor 0: equal priorities, first come first
   served under ``sched/builtin``);
2. **gpuhint**: the agent's Slurm feed publishes each job's events to Kafka, the real
   ``gpuhint worker`` writes hints to Redis, and ``gpuhint slurm apply-priorities`` sets
   SiteFactors from them while the jobs wait.

Slurm runs every job as the submitting user, so the feed restores each job's trace
user and name on its events (the model learns per user, as it would on a real site).
Average JCT, queueing and makespan are read back from Slurm's accounting and
multiplied by ``speed`` (trace seconds). The simulator (``gpuhint evaluate qssf``'s
code, closed loop, one VC of ``nodes`` x 8 GPUs) runs on the same jobs, so it is
checked against a real scheduler.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhint.lab.traces.readers import TraceJob
from gpuhint.slurm.commands import SlurmCli
from gpuhint.wire.contract import JobEvent, JobPhase, JobState, encode_message
from models.simulator.metrics import percentile

VC = "eval"
GPUS_PER_NODE = 8
Progress = Callable[[str], None]


class LoopError(RuntimeError):
    """The closed loop could not run (one line: what and why)."""


@dataclass(frozen=True)
class LoopJob:
    """One trace job as it is submitted: when (real seconds after t0), for how long."""

    trace: TraceJob
    at_s: float
    sleep_s: float
    gpus: int
    nodes: int


def select_jobs(jobs: Sequence[TraceJob], n: int, nodes: int) -> tuple[list[TraceJob], int]:
    """The first ``n`` GPU jobs (by submit time) that fit ``nodes`` x 8 GPUs; and how many
    larger ones were passed over."""
    cap = nodes * GPUS_PER_NODE
    out: list[TraceJob] = []
    too_big = 0
    for j in sorted(jobs, key=lambda j: (j.submit_time, j.line)):
        if j.num_gpus <= 0:
            continue
        if j.num_gpus > cap:
            too_big += 1
            continue
        out.append(j)
        if len(out) >= n:
            break
    return out, too_big


def default_speed(jobs: Sequence[TraceJob], nodes: int, budget_s: float = 300.0) -> float:
    """A compression that keeps one run near ``budget_s`` real seconds (an estimate).

    The makespan is at least the arrival span and at least the GPU-seconds over the
    cluster's GPUs; strict order (a big job at the head blocks all behind it) adds much
    more, hence the margin of 3 (measured: a 30-job Philly run at 1.5 took 402 s).
    """
    if not jobs:
        return 1.0
    span = max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)
    work = sum(j.num_gpus * j.duration for j in jobs) / (nodes * GPUS_PER_NODE)
    longest = max(j.duration for j in jobs)
    est = 3.0 * max(span, work, longest)
    return max(1.0, math.ceil(est / budget_s))


def compress(jobs: Sequence[TraceJob], speed: float) -> list[LoopJob]:
    t0 = min(j.submit_time for j in jobs)
    return [
        LoopJob(
            trace=j,
            at_s=(j.submit_time - t0) / speed,
            sleep_s=max(1.0, round(j.duration / speed, 2)),
            gpus=j.num_gpus,
            nodes=max(1, math.ceil(j.num_gpus / GPUS_PER_NODE)),
        )
        for j in jobs
    ]


def as_simulated(loop: Sequence[LoopJob], speed: float) -> list[TraceJob]:
    """The jobs as Slurm really ran them, in trace seconds (min-1-s sleeps), one VC."""
    return [
        dataclasses.replace(lj.trace, vc=VC, duration=lj.sleep_s * speed, start_time=None)
        for lj in loop
    ]


@dataclass
class RunResult:
    avg_jct_s: float
    avg_queue_s: float
    makespan_s: float
    jobs: int
    wall_s: float
    start_order: list[str] = field(default_factory=list)
    p99_queue_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "avg_jct_s": round(self.avg_jct_s, 1),
            "avg_queue_s": round(self.avg_queue_s, 1),
            "makespan_s": round(self.makespan_s, 1),
            "jobs": self.jobs,
            "wall_s": round(self.wall_s, 1),
            "p99_queue_s": round(self.p99_queue_s, 1),
        }


def submit_all(
    cli: SlurmCli,
    loop: Sequence[LoopJob],
    *,
    on_submitted: Callable[[str, LoopJob], None] | None = None,
    progress: Progress | None = None,
    tag: str = "",
) -> dict[str, LoopJob]:
    """Submit each job at its time; ``{slurm job id: job}``."""
    t0 = time.monotonic()
    ids: dict[str, LoopJob] = {}
    for k, lj in enumerate(loop):
        wait = lj.at_s - (time.monotonic() - t0)
        if wait > 0:
            time.sleep(wait)
        argv = [
            "sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-p", "gpu",
            "-J", f"{tag}{lj.trace.job_id}"[:100], "-N", str(lj.nodes), "-G", str(lj.gpus),
            "-c", "1", "-t", "UNLIMITED",
            "--wrap", f"sleep {lj.sleep_s:g}",
        ]  # fmt: skip
        job_id = cli.run(argv).strip().split(";")[0]
        ids[job_id] = lj
        if on_submitted is not None:
            on_submitted(job_id, lj)
        if progress and (k + 1) % 50 == 0:
            progress(f"  submitted {k + 1}/{len(loop)}")
    return ids


def wait_done(
    cli: SlurmCli, ids: Sequence[str], timeout_s: float, progress: Progress | None
) -> None:
    deadline = time.monotonic() + timeout_s
    last = -1
    while True:
        out = cli.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], check=False)
        left = len(out.split())
        if left == 0:
            return
        if progress and left != last and left % 25 == 0:
            progress(f"  {len(ids) - left}/{len(ids)} finished")
        last = left
        if time.monotonic() > deadline:
            raise LoopError(f"{left} job(s) still in Slurm after {timeout_s:.0f} s")
        time.sleep(1.0)


def accounting(cli: SlurmCli, ids: Sequence[str], speed: float, wall_s: float) -> RunResult:
    """JCT, queueing and makespan (trace seconds) from sacct, for ``ids``."""
    want = set(ids)
    rows: dict[str, tuple[float, float, float]] = {}
    for _ in range(30):  # the last records reach slurmdbd a moment after the jobs end
        doc = json.loads(cli.run(["sacct", "--json", "-X", "-j", ",".join(ids)]))
        for j in doc.get("jobs", []):
            t = j["time"]
            if str(j["job_id"]) in want and t.get("end"):
                rows[str(j["job_id"])] = (
                    float(t["submission"]),
                    float(t["start"]),
                    float(t["end"]),
                )
        if len(rows) == len(want):
            break
        time.sleep(1.0)
    if len(rows) != len(want):
        raise LoopError(f"accounting has {len(rows)} of {len(want)} jobs")
    jct = [e - s for s, _, e in rows.values()]
    queue = [st - s for s, st, _ in rows.values()]
    makespan = max(e for *_, e in rows.values()) - min(s for s, *_ in rows.values())
    order = sorted(rows, key=lambda k: (rows[k][1], int(k)))
    return RunResult(
        avg_jct_s=speed * sum(jct) / len(jct),
        avg_queue_s=speed * sum(queue) / len(queue),
        makespan_s=speed * makespan,
        jobs=len(rows),
        wall_s=wall_s,
        start_order=order,
        p99_queue_s=speed * percentile(sorted(queue), 99),
    )


def reset_site_factors(cli: SlurmCli) -> None:
    """Nothing should be left from an earlier run: no job in the queue."""
    out = cli.run(["squeue", "-h", "-o", "%i"], check=False).split()
    if out:
        raise LoopError(
            f"the Slurm cluster is not empty ({len(out)} job(s) queued): use a quiet one"
        )


class FeedThread(threading.Thread):
    """The agent's Slurm feed, polled every ``interval_s``; events relabelled and sent."""

    def __init__(
        self,
        conf: str,
        cluster: str,
        send: Callable[[JobEvent], None],
        relabel: Callable[[JobEvent], JobEvent | None],
        accept: Callable[[str], bool],
        interval_s: float = 1.0,
    ) -> None:
        super().__init__(daemon=True, name="slurm-feed")
        from gpuhint.slurm.feed import slurm_feed

        self.feed = slurm_feed("squeue", cluster=cluster)
        self.feed.accept = accept
        self.conf = conf
        self.send = send
        self.relabel = relabel
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        os.environ["SLURM_CONF"] = self.conf
        try:
            while not self.stop.is_set():
                for ev in self.feed.poll(time.time()):
                    out = self.relabel(ev)
                    if out is not None:
                        self.send(out)
                        self.sent += 1
                self.stop.wait(self.interval_s)
        except BaseException as exc:  # reported by the caller
            self.error = exc


@dataclass
class Services:
    slurm_conf: str
    bootstrap: str
    redis_url: str
    nodes: int


def run_gpuhint(
    cli: SlurmCli,
    svc: Services,
    loop: Sequence[LoopJob],
    *,
    speed: float,
    model: str,
    prefix: str,
    workdir: Path,
    progress: Progress,
    timeout_s: float,
) -> tuple[RunResult, int]:
    """Run 2: worker + apply-priorities + the feed in the loop. (result, hints applied)."""
    from kafka import KafkaProducer

    from gpuhint.redis.client import HintClient
    from gpuhint.wire.topics import Topics
    from streams.kafka_io import ensure_topics

    cluster = "evalslurm"
    topics = Topics(prefix)
    env = _worker_env(svc, prefix, cluster, model, workdir)
    ensure_topics(svc.bootstrap, topics, 2)
    producer = KafkaProducer(bootstrap_servers=svc.bootstrap, acks=1, linger_ms=5)
    gh = [sys.executable, "-m", "gpuhint"]
    worker_log = open(workdir / "worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen([*gh, "worker"], env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    applier: subprocess.Popen[str] | None = None
    feed: FeedThread | None = None
    client = HintClient.from_url(svc.redis_url, key_prefix=prefix)
    try:
        _wait_for_worker(producer, topics, cluster, client, worker, workdir, progress)

        applier = subprocess.Popen(
            [*gh, "slurm", "apply-priorities", "--interval", "5", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(workdir / "applier.log", "w"),  # noqa: SIM115
            text=True,
        )
        ids: dict[str, LoopJob] = {}

        feed = _feed(svc.slurm_conf, cluster, producer, topics, ids)
        lock = threading.Lock()

        def submitted(job_id: str, lj: LoopJob) -> None:
            with lock:
                ids[job_id] = lj

        feed.start()
        t0 = time.monotonic()
        submit_all(cli, loop, on_submitted=submitted, progress=progress, tag="g")
        wait_done(cli, list(ids), timeout_s, progress)
        wall = time.monotonic() - t0
        time.sleep(2)  # let the feed publish the last finishes
        if feed.error is not None:
            raise LoopError(f"Slurm feed failed: {feed.error}")
        result = accounting(cli, list(ids), speed, wall)
    finally:
        if feed is not None:
            feed.stop.set()
            feed.join(10)
        applied = _stop_applier(applier) if applier is not None else 0
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
        worker_log.close()
        producer.close(10)
        client.close()
    return result, applied


def _feed(
    slurm_conf: str, cluster: str, producer: Any, topics: Any, ids: dict[str, LoopJob]
) -> FeedThread:
    """The Slurm feed of the loop's jobs (those in ``ids``), relabeled with their trace's
    user and name, published as JobEvents."""
    from gpuhint.wire.topics import job_key

    def relabel(ev: JobEvent) -> JobEvent | None:
        lj = ids.get(ev.job_id)
        if lj is None:
            return None
        return ev.model_copy(
            update={"user": lj.trace.user, "name": lj.trace.name, "vc": VC, "cluster": cluster}
        )

    def send(ev: JobEvent) -> None:
        producer.send(topics.job_events, key=job_key(cluster, VC), value=encode_message(ev))
        producer.flush(10)

    return FeedThread(slurm_conf, cluster, send, relabel, accept=ids.__contains__)


def _worker_env(
    svc: Services, prefix: str, cluster: str, model: str, workdir: Path
) -> dict[str, str]:
    """The environment of the worker and apply-priorities: this run's topics and keys."""
    return {
        **os.environ,
        "SLURM_CONF": svc.slurm_conf,
        "GPUHINT_KAFKA_BOOTSTRAP": svc.bootstrap,
        "GPUHINT_REDIS_URL": svc.redis_url,
        "GPUHINT_TOPIC_PREFIX": prefix,
        "GPUHINT_KEY_PREFIX": prefix,
        "GPUHINT_APP_ID": f"{prefix}-worker",
        "GPUHINT_CLUSTER": cluster,
        "GPUHINT_MODEL": model,
        "GPUHINT_PARTITIONS": "2",
        "GPUHINT_STATE_DIR": str(workdir / "worker-state"),
        "GPUHINT_CES_ENABLED": "false",
        "PYTHONUNBUFFERED": "1",
    }


def _wait_for_worker(
    producer: Any,
    topics: Any,
    cluster: str,
    client: Any,
    worker: subprocess.Popen[bytes],
    workdir: Path,
    progress: Progress,
) -> None:
    """Readiness: a probe job in its own VC gets a hint once the worker consumes (then
    the probe finishes)."""
    from gpuhint.wire.topics import job_key

    probe = JobEvent(
        phase=JobPhase.SUBMITTED, job_id="probe", cluster=cluster, vc="probe",
        num_gpus=1, time=time.time(), submit_time=time.time(),
    )  # fmt: skip
    producer.send(topics.job_events, key=job_key(cluster, "probe"), value=encode_message(probe))
    producer.flush(30)
    progress("  waiting for the worker (probe hint)")
    deadline = time.monotonic() + 180
    while client.hint(cluster, "probe") is None:
        if worker.poll() is not None or time.monotonic() > deadline:
            tail = (workdir / "worker.log").read_text(errors="replace")[-2000:]
            raise LoopError(f"the worker did not come up:\n{tail}")
        time.sleep(0.5)
    done = probe.model_copy(
        update={"phase": JobPhase.FINISHED, "start_time": probe.time, "duration_s": 0.0,
                "state": JobState.COMPLETED, "time": time.time()}
    )  # fmt: skip
    producer.send(topics.job_events, key=job_key(cluster, "probe"), value=encode_message(done))
    producer.flush(30)


def _stop_applier(applier: subprocess.Popen[str]) -> int:
    """SIGTERM apply-priorities; the SiteFactor updates its JSON passes report."""
    applied = 0
    applier.send_signal(signal.SIGTERM)
    try:
        out, _ = applier.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        applier.kill()
        out, _ = applier.communicate()
    for line in out.splitlines():
        try:
            applied += int(json.loads(line).get("updated", 0))
        except (ValueError, AttributeError):
            continue
    return applied


def run_slurm_only(
    cli: SlurmCli, loop: Sequence[LoopJob], *, speed: float, progress: Progress, timeout_s: float
) -> RunResult:
    t0 = time.monotonic()
    ids = submit_all(cli, loop, progress=progress, tag="s")
    wait_done(cli, list(ids), timeout_s, progress)
    return accounting(cli, list(ids), speed, time.monotonic() - t0)


def simulate(
    loop: Sequence[LoopJob], speed: float, nodes: int, model: str, backfill: bool
) -> dict[str, Any]:
    """What the simulator predicts for the same jobs on one VC of ``nodes`` nodes."""
    from gpuhint.lab.evaluation.qssf import evaluate_qssf

    report = evaluate_qssf(
        as_simulated(loop, speed), model=model, vc_nodes={VC: nodes}, backfill=backfill,
        loop="closed",
    )  # fmt: skip
    d = report.as_dict()
    pol = d["policies"]
    return {
        "fifo_avg_jct_s": round(float(pol["fifo"]["avg_jct_s"]), 1),
        "qssf_avg_jct_s": round(float(pol["qssf"]["avg_jct_s"]), 1),
        "jct_ratio_fifo_over_qssf": d["jct_ratio_fifo_over_qssf"],
    }
