"""Fault scenarios on a real Kafka broker, a real Redis and real ``gpuhint worker`` processes.

Each scenario replays the same trace (good events, optionally interleaved with hostile
messages), injects its fault (SIGKILL a worker, kill the broker or Redis for a while),
waits until the workers have committed every offset, and compares the final Redis
state with the reference: the hints a single in-process :class:`~gpuhint.cores.qssf.HintEngine`
writes for the same good events. ``bench/chaos.py`` runs them all; ``tests/faults``
runs the short ones.

The harness owns its servers (it kills and restarts them), so it always uses the
project's launcher, never an external service.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from agents.publisher import KafkaTransport, Record, TransportError
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.faults.hostile import hostile_messages
from gpuhint.lab.local.services import LocalKafka, LocalRedis, free_port, kill_process
from gpuhint.wire.contract import JobEvent, PriorityHint, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from models.registry import make_model
from streams.kafka_io import ensure_topics


@dataclass
class ScenarioResult:
    """What one scenario ended with, against the reference (all zero is the target)."""

    name: str
    lost_hints: int = 0
    extra_hints: int = 0
    wrong_priority: int = 0
    dead_letters: int = 0
    bad_messages_sent: int = 0
    worker_crashes: int = 0
    recovery_s: float | None = None
    wall_s: float = 0.0
    settled: bool = True
    notes: list[str] = field(default_factory=list)
    lost_first_hints: int = 0
    """Jobs the reference hinted that no worker ever hinted (its change stream)."""
    wrong_first_priority: int = 0
    """Jobs whose first published priority differs from the reference's."""
    kills: int = 0
    """SIGKILLs the scenario sent."""
    gaps_sought_back: int = 0
    """Skipped offsets the workers found and sought back to (their logs)."""
    stuck_commit_max_s: float = 0.0
    """The longest a partition's committed offset stayed put with events behind it."""
    runs: int = 1
    events: int = 0
    rss_max_mb: float | None = None
    """The largest peak RSS (VmHWM) of a worker process, where measured."""

    @property
    def ok(self) -> bool:
        return (
            self.settled
            and self.lost_hints == self.extra_hints == self.wrong_priority == 0
            and self.lost_first_hints == self.wrong_first_priority == 0
            and self.worker_crashes == 0
            and self.dead_letters == self.bad_messages_sent
        )

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("name")
        return d


def reference_first_hints(events: list[JobEvent], model: str) -> dict[str, float]:
    """job id -> the priority of the first hint one uninterrupted engine publishes."""
    engine = HintEngine(lambda: make_model(model), InMemoryStore(max_buffer=10**9))
    first: dict[str, float] = {}
    for ev in events:
        hint = engine.on_job_event(ev)
        if hint is not None and ev.job_id not in first:
            first[ev.job_id] = hint.priority
        engine.store.flush()
    return first


def reference_hints(events: list[JobEvent], model: str) -> dict[str, float]:
    """job id -> priority of every hint one uninterrupted in-process engine leaves."""
    store = InMemoryStore()
    engine = HintEngine(lambda: make_model(model), store)
    for ev in events:
        engine.on_job_event(ev)
    store.flush()
    out: dict[str, float] = {}
    for ev in events:
        h = store.get_hint(ev.cluster, ev.job_id)
        if h is not None:
            out[ev.job_id] = h.priority
    return out


class Workers:
    """``gpuhint worker`` processes; one that dies on its own is a crash, and is restarted."""

    def __init__(self, env: dict[str, str], logdir: Path, static: bool = False) -> None:
        self.env = env
        self.logdir = logdir
        self.static = static
        """Each slot keeps one ``GPUHINT_WORKER_INSTANCE_ID`` across restarts (static
        group membership, as a StatefulSet's pod names give)."""
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, Path] = {}
        self.died_at: dict[int, float] = {}
        self.crashes = 0
        self.crash_lines: list[str] = []
        self._n = 0

    def start(self, slot: int = 0) -> None:
        self._n += 1
        log = self.logdir / f"worker-{slot}-{self._n}.log"
        fh = open(log, "wb")  # noqa: SIM115 - the child keeps it
        self.procs[slot] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuhint",
                "worker",
                "--loglevel",
                os.environ.get("GPUHINT_CHAOS_WORKER_LOGLEVEL", "warning"),
            ],
            env=self.env
            if not self.static
            else dict(self.env, GPUHINT_WORKER_INSTANCE_ID=f"{self.env['GPUHINT_APP_ID']}-{slot}"),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fh.close()
        self.logs[slot] = log

    def log_lines(self) -> int:
        """Lines written so far to every log of these workers."""
        return sum(
            p.read_bytes().count(b"\n") for p in self.logdir.glob("worker-*.log") if p.is_file()
        )

    def kill(self, slot: int = 0) -> None:
        p = self.procs.pop(slot)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)

    def check(self) -> None:
        """Count workers that exited on their own; restart them after 5 s (like systemd)."""
        now = time.monotonic()
        for slot, p in list(self.procs.items()):
            if p.poll() is None:
                continue
            if slot not in self.died_at:
                self.died_at[slot] = now
                self.crashes += 1
                tail = self.logs[slot].read_text(errors="replace").strip().splitlines()[-3:]
                self.crash_lines.append(f"worker exited {p.returncode}: {' | '.join(tail)}"[:400])
            elif now - self.died_at[slot] >= 5.0:
                del self.died_at[slot]
                self.start(slot)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        self.procs.clear()


class Chaos:
    """One broker and one Redis (restartable on the same ports) and the trace to replay."""

    def __init__(
        self,
        workdir: Path,
        events: list[JobEvent],
        cluster: str,
        model: str = "history_mix",
        partitions: int = 4,
        log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    ) -> None:
        self.workdir = workdir
        self.events = events
        self.cluster = cluster
        self.model = model
        self.partitions = partitions
        self.say = log
        port = free_port()
        self.kafka = LocalKafka(port=port, workdir=workdir / "kafka")
        self.redis_port = free_port()
        self.redis: LocalRedis | None = None
        self.reference = reference_hints(events, model)
        self.static_membership = False
        """Workers keep their group instance id across restarts (``Workers.static``)."""
        self._first: dict[str, float] | None = None
        self.maybe_resent = 0

    # --- servers -------------------------------------------------------------------------
    def __enter__(self) -> Chaos:
        self.kafka.start()
        self.start_redis(persist=False, fresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.redis is not None:
            self.redis.stop()
        self.kafka.stop()

    def start_redis(self, persist: bool, fresh: bool) -> None:
        d = self.workdir / "redis"
        if fresh and d.exists():
            for p in d.iterdir():
                if p.is_file():
                    p.unlink()
                else:
                    import shutil

                    shutil.rmtree(p, ignore_errors=True)
        self.redis = LocalRedis(port=self.redis_port, workdir=d, persist=persist).start()

    def kill_redis(self) -> None:
        assert self.redis is not None
        kill_process(self.redis)

    # --- plumbing ------------------------------------------------------------------------
    def env(self, prefix: str) -> dict[str, str]:
        assert self.redis is not None
        return dict(
            os.environ,
            GPUHINT_KAFKA_BOOTSTRAP=self.kafka.bootstrap,
            GPUHINT_REDIS_URL=self.redis.url,
            GPUHINT_TOPIC_PREFIX=prefix,
            GPUHINT_KEY_PREFIX=prefix,
            GPUHINT_APP_ID=f"{prefix}-worker",
            GPUHINT_PARTITIONS=str(self.partitions),
            GPUHINT_CLUSTER=self.cluster,
            GPUHINT_MODEL=self.model,
            GPUHINT_STATE_DIR=str(self.workdir / prefix / "state"),
            # every hint entry kept: the first published priority of each job is compared
            GPUHINT_CHANGES_MAXLEN=str(max(100_000, 4 * len(self.events))),
            PYTHONUNBUFFERED="1",
        )

    def transport(self) -> KafkaTransport:
        return KafkaTransport(
            self.kafka.bootstrap, client_id="chaos", max_in_flight_requests_per_connection=1
        )

    def records(self, prefix: str, bad: int, seed: int) -> tuple[list[Record], int]:
        """The good events with ``bad`` hostile messages interleaved (order per key kept)."""
        topic = Topics(prefix).job_events
        good = [Record(topic, job_key(e.cluster, e.vc), encode_message(e)) for e in self.events]
        if not bad:
            return good, 0
        rng = random.Random(seed)
        template = json.loads(encode_message(self.events[0]))
        keys = sorted({r.key for r in good})
        hostile = [
            Record(topic, rng.choice(keys), raw)
            for _, raw in hostile_messages(template, bad, seed=seed)
        ]
        # a valid event under the wrong key: the worker must dead-letter it too
        wrong_key = Record(topic, b"not/its-vc", encode_message(self.events[0]))
        hostile[: max(1, bad // 100)] = [wrong_key] * max(1, bad // 100)
        slots = sorted(rng.randrange(len(good) + 1) for _ in hostile)
        out: list[Record] = []
        j = 0
        for i, rec in enumerate(good):
            while j < len(slots) and slots[j] <= i:
                out.append(hostile[j])
                j += 1
            out.append(rec)
        out.extend(hostile[j:])
        return out, len(hostile)

    def send(self, records: list[Record], retry_s: float = 600.0, paced: bool = False) -> None:
        """Send records in order, each batch acknowledged, through any broker outage.

        ``paced``: about 200 records/s, so that faults land mid-stream. Records of a
        batch sent but not acknowledged are sent again (they may then be in the topic
        twice): :attr:`maybe_resent` counts them.
        """
        t = self.transport()
        i, down_since = 0, None
        batch = 20 if paced else 100
        while i < len(records):
            if paced:
                time.sleep(0.1)
            chunk = records[i : i + batch]
            try:
                n = t.send(chunk, 60.0)
            except TransportError:
                self.maybe_resent += len(chunk)
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > retry_s:
                    raise
                time.sleep(1.0)
                continue
            self.maybe_resent += len(chunk) - n
            down_since = None
            i += n
        t.close()

    def lag(self, prefix: str) -> int | None:
        """Job events not yet committed by the worker group (None: cannot tell now)."""
        got = self.committed_offsets(prefix)
        if got is None:
            return None
        committed, ends = got
        return sum(max(0, ends.get(p, 0) - c) for p, c in committed.items())

    def dead_letters(self, prefix: str) -> int:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            Topics(prefix).dead_letter,
            bootstrap_servers=self.kafka.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
            enable_auto_commit=False,
        )
        try:
            return sum(1 for _ in consumer)
        finally:
            consumer.close()

    def compare(self, prefix: str, res: ScenarioResult) -> None:
        assert self.redis is not None
        r = redis.Redis.from_url(self.redis.url)
        keys = RedisKeys(prefix)
        got: dict[str, float] = {}
        for k in r.scan_iter(match=f"{keys.root}:hint:{self.cluster}:*", count=1000):
            raw = r.get(k)
            if raw is None:
                continue
            hint = PriorityHint.model_validate_json(raw)
            got[hint.job_id] = hint.priority
        ref = self.reference
        res.lost_hints = len(ref.keys() - got.keys())
        res.extra_hints = len(got.keys() - ref.keys())
        res.wrong_priority = sum(
            1
            for j in ref.keys() & got.keys()
            if abs(got[j] - ref[j]) > 1e-6 * max(1.0, abs(ref[j]))
        )
        r.close()

    @property
    def reference_first(self) -> dict[str, float]:
        if self._first is None:
            self._first = reference_first_hints(self.events, self.model)
        return self._first

    def compare_first(self, prefix: str, res: ScenarioResult) -> None:
        """Each job's first published priority (the change stream) against the reference."""
        assert self.redis is not None
        r = redis.Redis.from_url(self.redis.url)
        first: dict[str, float] = {}
        lower = "-"
        try:
            while True:
                entries: Any = r.xrange(RedisKeys(prefix).changes, min=lower, count=10_000)
                if not entries:
                    break
                for _id, f in entries:
                    if f.get(b"type") == b"hint":
                        first.setdefault(f[b"job_id"].decode(), float(f[b"priority"]))
                lower = "(" + entries[-1][0].decode()  # exclusive: after the last one read
        finally:
            r.close()
        ref = self.reference_first
        res.lost_first_hints += len(ref.keys() - first.keys())
        res.wrong_first_priority += sum(
            1
            for j in ref.keys() & first.keys()
            if abs(first[j] - ref[j]) > 1e-6 * max(1.0, abs(ref[j]))
        )

    def committed_offsets(self, prefix: str) -> tuple[dict[int, int], dict[int, int]] | None:
        """The worker group's committed and end offsets per job-event partition."""
        from kafka import KafkaConsumer, TopicPartition

        topic = Topics(prefix).job_events
        tps = [TopicPartition(topic, p) for p in range(self.partitions)]
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.kafka.bootstrap,
                group_id=f"{prefix}-worker",
                enable_auto_commit=False,
                request_timeout_ms=5000,
            )
            try:
                committed = {tp.partition: consumer.committed(tp) or 0 for tp in tps}
                ends = {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
            finally:
                consumer.close()
        except Exception:
            return None
        return committed, ends

    def settle(self, prefix: str, workers: Workers, timeout_s: float) -> float | None:
        """Wait until every job event is committed; return when (None: never)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            workers.check()
            if self.lag(prefix) == 0:
                time.sleep(2.0)  # the last flush and commit interval
                if self.lag(prefix) == 0:
                    return time.monotonic()
            time.sleep(1.0)
        return None

    # --- scenarios -----------------------------------------------------------------------
    @contextlib.contextmanager
    def scenario(self, name: str, bad: int = 0) -> Iterator[tuple[str, ScenarioResult, Workers]]:
        prefix = f"c{uuid.uuid4().hex[:8]}"
        res = ScenarioResult(name)
        self.maybe_resent = 0
        (self.workdir / prefix).mkdir(parents=True, exist_ok=True)
        workers = Workers(self.env(prefix), self.workdir / prefix, self.static_membership)
        t0 = time.monotonic()
        self.say(f"[chaos] {name}: prefix {prefix}")
        try:
            yield prefix, res, workers
        finally:
            workers.stop()
            res.worker_crashes += workers.crashes
            res.notes.extend(workers.crash_lines[:5])
            res.wall_s = round(time.monotonic() - t0, 1)
            if self.maybe_resent:
                res.notes.append(f"{self.maybe_resent} records sent again after a failed send")
        with contextlib.suppress(Exception):
            res.dead_letters = self.dead_letters(prefix)
        self.compare(prefix, res)
        self.say(f"[chaos] {name}: {json.dumps(res.as_json())}")

    def run(self, name: str, timeout_s: float = 300.0, **kw: Any) -> ScenarioResult:
        return SCENARIOS[name](self, timeout_s=timeout_s, **kw)


def _replay_in_thread(chaos: Chaos, records: list[Record]) -> threading.Thread:
    th = threading.Thread(target=chaos.send, args=(records,), kwargs={"paced": True}, daemon=True)
    th.start()
    return th


def _changes(chaos: Chaos, prefix: str) -> int:
    assert chaos.redis is not None
    r = redis.Redis.from_url(chaos.redis.url, socket_timeout=2)
    try:
        return int(r.xlen(RedisKeys(prefix).changes))
    except redis.RedisError:
        return 0
    finally:
        r.close()


def _first_change(chaos: Chaos, prefix: str, timeout_s: float, after: int = 0) -> bool:
    """Wait until the change stream is longer than ``after`` (a worker is writing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _changes(chaos, prefix) > after:
            return True
        time.sleep(0.05)
    return False


def _finish(chaos: Chaos, prefix: str, res: ScenarioResult, w: Workers, timeout_s: float) -> None:
    t = time.monotonic()
    done = chaos.settle(prefix, w, timeout_s)
    res.settled = done is not None
    if res.recovery_s is None and done is not None:
        res.recovery_s = round(done - t, 1)


def reference(chaos: Chaos, timeout_s: float, bad: int = 0, seed: int = 1) -> ScenarioResult:
    name = "reference" if not bad else f"malformed_{bad}"
    with chaos.scenario(name) as (prefix, res, w):
        recs, res.bad_messages_sent = chaos.records(prefix, bad, seed)
        w.start()
        chaos.send(recs)
        _finish(chaos, prefix, res, w, timeout_s)
    return res


def malformed(chaos: Chaos, timeout_s: float, bad: int = 10_000, seed: int = 1) -> ScenarioResult:
    return reference(chaos, timeout_s, bad=bad, seed=seed)


def sigkill_worker(chaos: Chaos, timeout_s: float, kills: int = 3) -> ScenarioResult:
    """SIGKILL the worker ``kills`` times, each time once its successor is writing again."""
    with chaos.scenario(f"sigkill_worker_x{kills}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        th = _replay_in_thread(chaos, recs)
        w.start()
        seen = 0
        for i in range(kills):
            if not _first_change(chaos, prefix, timeout_s, after=seen):
                res.notes.append(f"kill {i + 1}: the worker wrote nothing new; not killed")
                break
            time.sleep(0.2 * i)  # at the first write, then a little later each time
            w.kill()
            seen = _changes(chaos, prefix)
            w.start()
        th.join()
        _finish(chaos, prefix, res, w, timeout_s)
    return res


def rebalance(chaos: Chaos, timeout_s: float) -> ScenarioResult:
    """Two workers share the partitions; one is SIGKILLed once both hold some."""
    with chaos.scenario("two_workers_one_killed") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        w.start(0)
        w.start(1)
        half = len(recs) // 2
        chaos.send(recs[:half])
        _first_change(chaos, prefix, timeout_s)
        time.sleep(15.0)  # the group settles: both members own partitions
        th = _replay_in_thread(chaos, recs[half:])
        time.sleep(1.0)
        w.kill(1)  # mid-stream: its partitions move to worker 0
        t_kill = time.monotonic()
        th.join()
        _finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_kill, 1)
    return res


def broker_down(chaos: Chaos, timeout_s: float, down_s: float = 30.0) -> ScenarioResult:
    with chaos.scenario(f"broker_down_{down_s:.0f}s") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        w.start()
        half = len(recs) // 2
        chaos.send(recs[:half])
        _first_change(chaos, prefix, timeout_s)
        kill_process(chaos.kafka)
        lines0 = w.log_lines()
        th = _replay_in_thread(chaos, recs[half:])  # the replay keeps retrying meanwhile
        time.sleep(down_s)
        rate = (w.log_lines() - lines0) / down_s
        res.notes.append(f"worker log lines/s while the broker was down: {rate:.1f}")
        chaos.kafka.start()
        t_back = time.monotonic()
        th.join()
        _finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_back, 1)
    return res


def redis_restart(chaos: Chaos, timeout_s: float, aof: bool = False) -> ScenarioResult:
    name = "redis_restart_aof" if aof else "redis_restart_empty"
    with chaos.scenario(name) as (prefix, res, w):
        chaos.kill_redis()
        chaos.start_redis(persist=aof, fresh=True)
        recs, _ = chaos.records(prefix, 0, 0)
        w.start()
        half = len(recs) // 2
        chaos.send(recs[:half])
        _first_change(chaos, prefix, timeout_s)
        time.sleep(1.0)
        chaos.kill_redis()
        th = _replay_in_thread(chaos, recs[half:])
        time.sleep(5.0)
        chaos.start_redis(persist=aof, fresh=not aof)
        t_back = time.monotonic()
        th.join()
        _finish(chaos, prefix, res, w, timeout_s)
        res.recovery_s = round(time.monotonic() - t_back, 1)
    chaos.kill_redis()
    chaos.start_redis(persist=False, fresh=True)
    return res


class CommitWatch:
    """Samples the group's commits every second: how long did a partition's commit stay
    put while events waited behind it (the longest, over the whole scenario)?"""

    def __init__(self, chaos: Chaos, prefix: str) -> None:
        self.chaos, self.prefix = chaos, prefix
        self.since: dict[int, tuple[int, float]] = {}
        self.stuck_max_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            got = self.chaos.committed_offsets(self.prefix)
            if got is None:
                continue
            now = time.monotonic()
            committed, ends = got
            for p, c in committed.items():
                prev = self.since.get(p)
                if prev is None or prev[0] != c or ends.get(p, 0) <= c:
                    self.since[p] = (c, now)
                else:
                    self.stuck_max_s = max(self.stuck_max_s, now - prev[1])


def _gaps_logged(workers: Workers) -> int:
    return sum(
        p.read_bytes().count(b"were skipped on the way")
        for p in workers.logdir.glob("worker-*.log")
        if p.is_file()
    )


def kill_storm_run(
    chaos: Chaos, timeout_s: float, kills: int = 4, workers: int = 1, seed: int = 1
) -> ScenarioResult:
    """One run of the kill storm: the whole trace waits in Kafka (a backlog), then
    ``workers`` workers start and are SIGKILLed ``kills`` times at random points and
    restarted at once; at least two kills land while a restarted worker restores its
    state from the changelog (within ~3 s of its start). Every job's first and final
    priority is compared with the reference."""
    rng = random.Random(seed)
    with chaos.scenario(f"kill_storm_w{workers}_s{seed}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        ensure_topics(chaos.kafka.bootstrap, Topics(prefix), chaos.partitions)
        chaos.send(recs)  # the backlog, before any worker
        with CommitWatch(chaos, prefix) as watch:
            for slot in range(workers):
                w.start(slot)
            during_restore = (
                set(rng.sample(range(1, kills), min(2, kills - 1))) if kills > 1 else set()
            )
            for i in range(kills):
                if i in during_restore:
                    time.sleep(rng.uniform(0.5, 3.0))  # the successor is still restoring
                else:
                    seen = _changes(chaos, prefix)
                    want = seen + rng.randint(200, max(400, len(chaos.events) // (2 * kills)))
                    deadline = time.monotonic() + timeout_s / (kills + 1)
                    while _changes(chaos, prefix) < want and time.monotonic() < deadline:
                        time.sleep(0.05)
                slot = rng.randrange(workers)
                if slot in w.procs:
                    w.kill(slot)
                    res.kills += 1
                    w.start(slot)
            _finish(chaos, prefix, res, w, timeout_s)
            res.stuck_commit_max_s = round(watch.stuck_max_s, 1)
        res.gaps_sought_back = _gaps_logged(w)
        chaos.compare_first(prefix, res)
    return res


def kill_storm(
    chaos: Chaos,
    timeout_s: float,
    seeds: tuple[int, ...] = (1, 2, 3),
    workers: tuple[int, ...] = (1, 2),
    kills: int = 4,
) -> ScenarioResult:
    """:func:`kill_storm_run` for every seed and worker count; the counts summed."""
    total = ScenarioResult("kill_storm")
    runs = 0
    for n in workers:
        for seed in seeds:
            r = kill_storm_run(chaos, timeout_s, kills=kills, workers=n, seed=seed)
            runs += 1
            for f in (
                "lost_hints",
                "extra_hints",
                "wrong_priority",
                "dead_letters",
                "bad_messages_sent",
                "worker_crashes",
                "lost_first_hints",
                "wrong_first_priority",
                "kills",
                "gaps_sought_back",
            ):
                setattr(total, f, getattr(total, f) + getattr(r, f))
            total.wall_s = round(total.wall_s + r.wall_s, 1)
            total.settled = total.settled and r.settled
            total.stuck_commit_max_s = max(total.stuck_commit_max_s, r.stuck_commit_max_s)
            if not r.ok:
                total.notes.append(f"{r.name}: {json.dumps(r.as_json())}"[:400])
    total.runs = runs
    total.events = len(chaos.events) * runs
    return total


def _peak_rss_mb(workers: Workers) -> float | None:
    """The largest VmHWM among the live worker processes, in MB."""
    best = None
    for p in workers.procs.values():
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        mb = int(line.split()[1]) / 1024
                        best = mb if best is None else max(best, mb)
        except OSError:
            continue
    return None if best is None else round(best, 1)


def big_vc_events(waiting: int = 25_000, cluster: str = "chaos") -> list[JobEvent]:
    """One VC with ``waiting`` jobs submitted and never started (one large sweep), and a
    small VC beside it whose jobs run and finish: nothing the big one does may stop it."""
    raw: list[dict[str, Any]] = [
        dict(phase="submitted", job_id=f"sweep-{i}", vc="sweep", user="u1", num_gpus=1,
             time=float(i), submit_time=float(i))
        for i in range(waiting)
    ]  # fmt: skip
    for i in range(200):
        t = float(i * 10)
        base = dict(job_id=f"small-{i}", vc="small", user="u2", num_gpus=2, submit_time=t)
        raw.append(dict(base, phase="submitted", time=t))
        if i % 4:  # three in four run; the rest wait
            raw.append(dict(base, phase="started", time=t + 1, start_time=t + 1))
            raw.append(
                dict(base, phase="finished", time=t + 5, start_time=t + 1,
                     duration_s=4.0)
            )  # fmt: skip
    evs = [JobEvent.model_validate(dict(r, cluster=cluster)) for r in raw]
    return sorted(evs, key=lambda e: e.time)


def many_vcs_events(vcs: int = 100_000, cluster: str = "chaos") -> list[JobEvent]:
    """``vcs`` distinct VCs, one waiting job each (a producer naming a VC per sweep)."""
    return [
        JobEvent.model_validate(
            dict(
                phase="submitted",
                job_id=f"j{i}",
                cluster=cluster,
                vc=f"vc{i}",
                num_gpus=1,
                time=float(i),
                submit_time=float(i),
            )
        )
        for i in range(vcs)
    ]


def load_run(chaos: Chaos, timeout_s: float, name: str) -> ScenarioResult:
    """One worker drains the whole trace (already in Kafka); its peak RSS is recorded.
    For ``big_vc`` / ``many_vcs`` (their events are the chaos' trace)."""
    with chaos.scenario(name) as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        ensure_topics(chaos.kafka.bootstrap, Topics(prefix), chaos.partitions)
        chaos.send(recs)
        w.start()
        _finish(chaos, prefix, res, w, timeout_s)
        res.rss_max_mb = _peak_rss_mb(w)
        res.events = len(recs)
    return res


def resent(records: list[Record], share: float, seed: int) -> tuple[list[Record], int]:
    """``records`` with ``share`` of them sent a second time, 1-300 records later (as a
    producer's retry does: a new record, a new offset, same key)."""
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(len(records)), max(1, int(len(records) * share))))
    later: dict[int, list[Record]] = {}
    for i in picks:
        later.setdefault(min(len(records) - 1, i + rng.randint(1, 300)), []).append(records[i])
    out: list[Record] = []
    for i, rec in enumerate(records):
        out.append(rec)
        out.extend(later.get(i, []))
    return out, len(picks)


def duplicates(
    chaos: Chaos, timeout_s: float, share: float = 0.01, seed: int = 1
) -> ScenarioResult:
    """1% of the job events resent (a new record each): every job's first and final
    priority must equal the reference's, which saw each event once."""
    with chaos.scenario(f"duplicates_{share:.0%}") as (prefix, res, w):
        recs, _ = chaos.records(prefix, 0, 0)
        recs, n = resent(recs, share, seed)
        res.notes.append(f"{n} events resent")
        w.start()
        chaos.send(recs)
        _finish(chaos, prefix, res, w, timeout_s)
        chaos.compare_first(prefix, res)
    return res


SCENARIOS: dict[str, Callable[..., ScenarioResult]] = {
    "reference": reference,
    "sigkill_worker": sigkill_worker,
    "two_workers_one_killed": rebalance,
    "broker_down_30s": lambda c, timeout_s: broker_down(c, timeout_s, 30.0),
    "broker_down_150s": lambda c, timeout_s: broker_down(c, timeout_s, 150.0),
    "redis_restart_empty": lambda c, timeout_s: redis_restart(c, timeout_s, aof=False),
    "redis_restart_aof": lambda c, timeout_s: redis_restart(c, timeout_s, aof=True),
    "malformed_10000": malformed,
    "kill_storm": kill_storm,
    "duplicates_1pct": duplicates,
}
"""Every scenario of ``bench/chaos.py``, by the name it reports under."""
