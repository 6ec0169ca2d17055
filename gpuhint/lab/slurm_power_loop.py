"""``gpuhint evaluate slurm --power``: the same jobs on a real Slurm with power saving on,
under Slurm's own idle timer and under gpuhint's power advice.

Each run gets a fresh private Slurm (``LocalSlurm``) whose SuspendProgram stops a node's
slurmd ("off") and whose ResumeProgram starts it again after a boot delay, everything
compressed ``speed`` times like the jobs:

0. **all_on**: no node is ever powered down (the reference for the waits: at a high
   compression Slurm's own per-job overheads dominate them, so a run is judged by the
   wait it adds to this one's, ``added_wait_avg_s``);
1. **idle_timer**: ``SuspendTime`` = the given idle time; Slurm powers nodes down and
   wakes them for jobs by itself;
2. **gpuhint**: Slurm never suspends on its own (``SuspendTime`` 30 days); the agent's
   Slurm job feed and ``--slurm-nodes`` node feed -> Kafka -> ``gpuhint worker`` (its CES
   engine) -> Redis -> ``gpuhint slurm apply-power`` powers nodes
   down and up; Slurm still wakes a node a job is given. The feeds stamp events in
   trace time (:class:`TraceClock`), so CES runs on the trace's time scale.

Both keep Slurm's own job order (no SiteFactor): only power differs. A sampler reads
``sinfo`` every 0.5 s and integrates the node-seconds each node is off (``~``) or
booting (``#``); job waits come from Slurm's accounting. All figures are in trace seconds.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhint.lab.slurm_loop import (
    FeedThread,
    LoopError,
    LoopJob,
    Progress,
    RunResult,
    Services,
    _feed,
    _wait_for_worker,
    _worker_env,
    run_slurm_only,
)
from gpuhint.slurm.commands import SlurmCli
from gpuhint.wire.contract import JobEvent

NEVER_S = 30 * 86400
"""SuspendTime of the gpuhint and all-on runs, in *wall* seconds (not compressed: 30 trace
days at speed 22,141 would be under two wall minutes): Slurm never powers a node down
by itself."""


@dataclass(frozen=True)
class PowerSetup:
    """The power side of a run, in trace seconds (divided by ``speed`` on the real Slurm)."""

    speed: float
    boot_s: float = 300.0
    suspend_time_s: float = 3600.0
    min_idle: int = 0
    """``apply-power --min-idle`` in the gpuhint run (0: the policy's reserve alone decides,
    as in the simulator; ``--min-on`` is 0 too)."""

    def wall(self, trace_s: float) -> float:
        return trace_s / self.speed

    @property
    def suspend_wall_s(self) -> int:
        """Slurm's SuspendTime in the idle-timer run: whole wall seconds, at least 1."""
        return max(1, round(self.wall(self.suspend_time_s)))

    @property
    def confirm_s(self) -> float:
        """The worker's ``GPUHINT_CES_CONFIRM_S`` (trace s): its advice is believed for
        10 wall seconds (the node feed's and apply-power's 1 s, the test cluster's
        ``SuspendTimeout=5`` while a node powers down), at least 300 trace s. Shorter,
        and the engine takes a node still powering down for one that stayed on, picks
        another, and the advice flaps. At most the setting's limit, a day (a speed above
        8,640 gets less than 10 wall s)."""
        return min(86400.0, max(300.0, 10.0 * self.speed))


RESOLVE_SUSPEND = 10.0
"""The power runs' default compression keeps SuspendTime at least this many wall seconds,
so that Slurm's whole-second SuspendTime and its 1 s power-save pass resolve it to 10%."""


def power_speed(default: float, suspend_time_s: float) -> float:
    """``--power``'s default compression: the loop's, but slow enough for SuspendTime.

    >>> power_speed(22141, 3600), power_speed(50, 3600)
    (360.0, 50)
    """
    return min(default, max(1.0, suspend_time_s / RESOLVE_SUSPEND))


def suspend_rounding(setup: PowerSetup) -> str | None:
    """A warning when whole wall seconds move SuspendTime by more than 10%, else None."""
    real = setup.suspend_wall_s * setup.speed
    if abs(real - setup.suspend_time_s) <= 0.1 * setup.suspend_time_s:
        return None
    return (
        f"at speed {setup.speed:g} SuspendTime {setup.suspend_time_s:g} s is "
        f"{setup.wall(setup.suspend_time_s):.2f} wall s, which Slurm rounds to "
        f"{setup.suspend_wall_s} s: the idle timer runs at {real:g} trace s "
        f"(use --speed <= {setup.suspend_time_s / RESOLVE_SUSPEND:g})"
    )


@dataclass(frozen=True)
class TraceClock:
    """Wall time -> trace time: ``t0 + (t - t0) * speed``. The feeds stamp every event
    and node status in trace time, so the worker's CES decides on the trace's time scale
    (its warm-up, ticks, boot time and cycle limits are in seconds of the trace)."""

    t0: float
    speed: float

    def __call__(self, t: float) -> float:
        return self.t0 + (t - self.t0) * self.speed

    def job(self, ev: JobEvent) -> JobEvent:
        start = None if ev.start_time is None else self(ev.start_time)
        dur = None if ev.duration_s is None else ev.duration_s * self.speed
        return ev.model_copy(
            update={"time": self(ev.time), "submit_time": self(ev.submit_time),
                    "start_time": start, "duration_s": dur}
        )  # fmt: skip


class OffMeter(threading.Thread):
    """Samples ``sinfo`` and integrates node-seconds off (``~``) and booting (``#``, or
    a node in POWERING_UP); counts power-ups (a node leaving ``~``)."""

    def __init__(self, conf: str, every_s: float = 0.5) -> None:
        super().__init__(daemon=True, name="off-meter")
        self.cli = SlurmCli(conf)
        self.every_s = every_s
        self.stop = threading.Event()
        self.off_s = 0.0
        self.boot_s = 0.0
        self.power_ups = 0
        self._last: dict[str, str] = {}

    def sample(self) -> dict[str, str]:
        out = self.cli.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(ln.split(None, 1) for ln in out.splitlines() if len(ln.split()) == 2)

    def run(self) -> None:
        t = time.monotonic()
        while not self.stop.wait(self.every_s):
            now = time.monotonic()
            states = self.sample()
            dt = now - t
            t = now
            self.off_s += dt * sum(1 for s in states.values() if s.endswith("~"))
            self.boot_s += dt * sum(1 for s in states.values() if s.endswith("#"))
            self.power_ups += sum(
                1
                for n, s in states.items()
                if self._last.get(n, "").endswith("~") and not s.endswith("~")
            )
            self._last = states


@dataclass
class PowerRun:
    """One run: the jobs' figures and the nodes' power figures, in trace seconds."""

    jobs: RunResult
    node_hours_off: float
    node_hours_booting: float
    power_ups: int
    setting: float | str

    def as_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "node_hours_off": round(self.node_hours_off, 3),
            "node_hours_booting": round(self.node_hours_booting, 3),
            "power_ups": self.power_ups,
            "avg_wait_s": round(self.jobs.avg_queue_s, 1),
            "p99_wait_s": round(self.jobs.p99_queue_s, 1),
            **self.jobs.as_dict(),
        }


def _slurm(nodes: int, sched: str, setup: PowerSetup, suspend_trace_s: float) -> Any:
    from gpuhint.lab.local.slurm import LocalSlurm

    return LocalSlurm(
        nodes,
        sched=sched,
        suspend_time=(
            NEVER_S if suspend_trace_s >= NEVER_S else max(1, round(setup.wall(suspend_trace_s)))
        ),  # the idle timer's: suspend_wall_s
        boot_delay_s=round(setup.wall(setup.boot_s), 2),
        # power saving checked every second (22.05's default is every 10 s)
        extra_conf=["SlurmctldParameters=power_save_interval=1,power_save_min_interval=0"],
    )


@contextmanager
def _metered(conf: str) -> Iterator[OffMeter]:
    meter = OffMeter(conf)
    meter.start()
    try:
        yield meter
    finally:
        meter.stop.set()
        meter.join(10)


def _result(meter: OffMeter, jobs: RunResult, setup: PowerSetup, setting: float | str) -> PowerRun:
    return PowerRun(
        jobs=jobs,
        node_hours_off=meter.off_s * setup.speed / 3600,
        node_hours_booting=meter.boot_s * setup.speed / 3600,
        power_ups=meter.power_ups,
        setting=setting,
    )


def run_idle_timer(
    loop: Sequence[LoopJob],
    nodes: int,
    sched: str,
    setup: PowerSetup,
    progress: Progress,
    timeout_s: float,
    *,
    suspend_time_s: float | None = None,
) -> PowerRun:
    """Slurm's SuspendTime alone (``suspend_time_s``, else the setup's); with
    :data:`NEVER_S`, the all-nodes-on reference whose waits the others add to."""
    suspend = setup.suspend_time_s if suspend_time_s is None else suspend_time_s
    with _slurm(nodes, sched, setup, suspend) as s:
        s.start()
        with _metered(str(s.conf)) as meter:
            jobs = run_slurm_only(
                SlurmCli(str(s.conf)), loop, speed=setup.speed, progress=progress,
                timeout_s=timeout_s,
            )  # fmt: skip
        return _result(meter, jobs, setup, "all_on" if suspend >= NEVER_S else suspend)


def run_all_on(
    loop: Sequence[LoopJob],
    nodes: int,
    sched: str,
    setup: PowerSetup,
    progress: Progress,
    timeout_s: float,
) -> PowerRun:
    """The reference: the same Slurm and jobs with no node ever powered down. At a high
    ``speed`` Slurm's own per-job overheads (about a wall second a start) dominate the
    waits, so power saving is judged by the wait it *adds* to this run's."""
    return run_idle_timer(loop, nodes, sched, setup, progress, timeout_s, suspend_time_s=NEVER_S)


def with_added_wait(run: dict[str, Any], all_on: dict[str, Any]) -> dict[str, Any]:
    """``run`` plus ``added_wait_avg_s``: its average wait minus the all-on run's.

    >>> with_added_wait({"avg_wait_s": 90.0}, {"avg_wait_s": 60.0})["added_wait_avg_s"]
    30.0
    """
    return {**run, "added_wait_avg_s": round(run["avg_wait_s"] - all_on["avg_wait_s"], 1)}


def run_gpuhint_power(
    loop: Sequence[LoopJob],
    nodes: int,
    sched: str,
    setup: PowerSetup,
    kafka_redis: tuple[str, str],
    *,
    model: str,
    prefix: str,
    workdir: Path,
    progress: Progress,
    timeout_s: float,
) -> PowerRun:
    """Run 2: the worker's CES advice applied by ``apply-power``; Slurm's timer off."""
    with _slurm(nodes, sched, setup, NEVER_S) as s:
        s.start()
        svc = Services(str(s.conf), kafka_redis[0], kafka_redis[1], nodes)
        with (
            _gpuhint_services(svc, setup, model, prefix, workdir, progress) as ids,
            _metered(str(s.conf)) as meter,
        ):
            cli = SlurmCli(str(s.conf))
            jobs = _run_tracked(cli, loop, ids, setup, progress, timeout_s)
        return _result(meter, jobs, setup, "gpuhint")


def _run_tracked(
    cli: SlurmCli,
    loop: Sequence[LoopJob],
    ids: dict[str, LoopJob],
    setup: PowerSetup,
    progress: Progress,
    timeout_s: float,
) -> RunResult:
    from gpuhint.lab.slurm_loop import accounting, submit_all, wait_done

    t0 = time.monotonic()
    submit_all(cli, loop, on_submitted=ids.__setitem__, progress=progress, tag="p")
    wait_done(cli, list(ids), timeout_s, progress)
    return accounting(cli, list(ids), setup.speed, time.monotonic() - t0)


@contextmanager
def _gpuhint_services(
    svc: Services,
    setup: PowerSetup,
    model: str,
    prefix: str,
    workdir: Path,
    progress: Progress,
) -> Iterator[dict[str, LoopJob]]:
    """Worker (CES on) + job and node feeds + apply-power, for the run's lifetime;
    yields the job-id map the job feed relabels from."""
    from kafka import KafkaProducer

    from gpuhint.redis.client import HintClient
    from gpuhint.wire.topics import Topics
    from streams.kafka_io import ensure_topics

    cluster = "evalslurm"
    topics = Topics(prefix)
    env = _power_env(svc, prefix, cluster, model, workdir, setup)
    ensure_topics(svc.bootstrap, topics, 2)
    producer = KafkaProducer(bootstrap_servers=svc.bootstrap, acks=1, linger_ms=5)
    gh = [sys.executable, "-m", "gpuhint"]
    logs = [open(workdir / f"{n}.log", "wb") for n in ("worker", "apply-power")]  # noqa: SIM115
    worker = subprocess.Popen([*gh, "worker"], env=env, stdout=logs[0], stderr=subprocess.STDOUT)
    procs = [worker]
    client = HintClient.from_url(svc.redis_url, key_prefix=prefix)
    ids: dict[str, LoopJob] = {}
    feeds: list[Any] = []
    try:
        _wait_for_worker(producer, topics, cluster, client, worker, workdir, progress)
        resume_timeout = max(30.0, 3 * setup.wall(setup.boot_s) + 20)
        power = [*gh, "slurm", "apply-power", "--interval", "1", "--resume-timeout",
                 f"{resume_timeout:g}", "--min-idle", str(setup.min_idle),
                 "--min-on", "0"]  # fmt: skip
        procs.append(subprocess.Popen(power, env=env, stdout=logs[1], stderr=subprocess.STDOUT))
        clock = TraceClock(time.time(), setup.speed)
        feeds = [_job_feed(svc.slurm_conf, cluster, producer, topics, ids, clock)]
        feeds.append(_NodeThread(svc.slurm_conf, cluster, producer, topics, clock))
        for f in feeds:
            f.start()
        yield ids
        time.sleep(2)  # the last finishes reach the worker
        for f in feeds:
            if f.error is not None:
                raise LoopError(f"{f.name} failed: {f.error}")
    finally:
        for f in feeds:
            f.stop.set()
            f.join(10)
        for p in reversed(procs):
            _stop(p)
        for fh in logs:
            fh.close()
        producer.close(10)
        client.close()


def _power_env(
    svc: Services, prefix: str, cluster: str, model: str, workdir: Path, setup: PowerSetup
) -> dict[str, str]:
    return {
        **_worker_env(svc, prefix, cluster, model, workdir),
        "GPUHINT_CES_ENABLED": "true",
        "GPUHINT_CES_BOOT_S": f"{setup.boot_s:g}",  # trace seconds: the feeds' clock
        "GPUHINT_CES_CONFIRM_S": f"{setup.confirm_s:g}",
        # events run ahead of the wall clock by up to (speed - 1) x the run's length
        "GPUHINT_MAX_FUTURE_S": f"{86400.0 * setup.speed:.0f}",
    }


def _job_feed(
    conf: str,
    cluster: str,
    producer: Any,
    topics: Any,
    ids: dict[str, LoopJob],
    clock: TraceClock,
) -> FeedThread:
    """The loop's job feed (:func:`~gpuhint.lab.slurm_loop._feed`), in trace time."""
    feed = _feed(conf, cluster, producer, topics, ids)
    relabel = feed.relabel

    def scaled(ev: JobEvent) -> JobEvent | None:
        out = relabel(ev)
        return None if out is None else clock.job(out)

    feed.relabel = scaled
    return feed


class _NodeThread(threading.Thread):
    """``--slurm-nodes``: every node's NodeStatus, published each second."""

    def __init__(
        self, conf: str, cluster: str, producer: Any, topics: Any, clock: TraceClock
    ) -> None:
        super().__init__(daemon=True, name="slurm-nodes")
        self.clock = clock
        from gpuhint.slurm.nodes import SINFO_CMD, SlurmNodeFeed

        self.feed = SlurmNodeFeed(("env", f"SLURM_CONF={conf}", *SINFO_CMD), cluster=cluster)
        self.producer = producer
        self.topics = topics
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from gpuhint.wire.contract import encode_message
        from gpuhint.wire.topics import node_key

        try:
            while not self.stop.is_set():
                for ns in self.feed.poll(self.clock(time.time())):
                    key = node_key(ns.cluster, ns.node)
                    self.producer.send(self.topics.node_status, key=key, value=encode_message(ns))
                self.producer.flush(10)
                self.stop.wait(1.0)
        except BaseException as exc:  # reported by the caller
            self.error = exc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
