"""The fault suite's harness: one broker and one Redis (restartable on the same ports),
the trace to replay, the uninterrupted in-process reference, and the comparison of a
scenario's final Redis state with it (:mod:`gpuhint.lab.faults.chaos`)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import redis

from agents.publisher import KafkaTransport, Record, TransportError
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.faults.chaos_workers import Workers
from gpuhint.lab.faults.hostile import hostile_messages
from gpuhint.lab.local.services import LocalKafka, LocalRedis, free_port, kill_process
from gpuhint.wire.contract import JobEvent, PriorityHint, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from models.registry import make_model


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


class ChaosHarness:
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
    def __enter__(self) -> Self:
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


def replay_in_thread(chaos: ChaosHarness, records: list[Record]) -> threading.Thread:
    th = threading.Thread(target=chaos.send, args=(records,), kwargs={"paced": True}, daemon=True)
    th.start()
    return th


def changes(chaos: ChaosHarness, prefix: str) -> int:
    assert chaos.redis is not None
    r = redis.Redis.from_url(chaos.redis.url, socket_timeout=2)
    try:
        return int(r.xlen(RedisKeys(prefix).changes))
    except redis.RedisError:
        return 0
    finally:
        r.close()


def first_change(chaos: ChaosHarness, prefix: str, timeout_s: float, after: int = 0) -> bool:
    """Wait until the change stream is longer than ``after`` (a worker is writing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if changes(chaos, prefix) > after:
            return True
        time.sleep(0.05)
    return False


def finish(
    chaos: ChaosHarness, prefix: str, res: ScenarioResult, w: Workers, timeout_s: float
) -> None:
    t = time.monotonic()
    done = chaos.settle(prefix, w, timeout_s)
    res.settled = done is not None
    if res.recovery_s is None and done is not None:
        res.recovery_s = round(done - t, 1)
