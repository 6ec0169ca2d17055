"""A commit never passes a record the broker has not acknowledged.

Faust flushes its producer before it commits, but (1) its buffer's flush gives up after
0.1 s a message (a changelog record written with ``send_soon`` may still be queued
when the commit goes out) and (2) a record the broker refuses (an ACL, too large, not
enough replicas) only logs a warning: the commit then carries offsets whose VC state,
forward or dead letter never reached Kafka, and a restart starts past them. The
worker's commits wait for every record it produced (VC and CES state, dead letters,
forwards) to be acknowledged, and a refused one stops the worker before the commit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from faust.types import TP
from kafka.errors import TopicAuthorizationFailedError

from gpuhint.cores.pipeline.handler import Forward, Outcome
from gpuhint.wire.config import load_settings
from streams.faust_consumer import CheckpointApp
from streams.faust_io import Channels


class _HeldProducer:
    """Faust's producer where nothing is acknowledged until the test says so."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[Any]] = []

    def send_soon(self, fut: Any) -> None:
        self.pending.append(fut)  # the buffer's FutureMessage: resolved on the ack

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return fut

    async def flush(self) -> None:
        pass  # as Faust's buffer flush after its 0.1 s timeout: the records still out

    async def maybe_start(self) -> None:
        pass


def _worker_edge(tmp_path: Path) -> tuple[Any, Channels, Any, list[dict[Any, int]], list[str]]:
    settings = load_settings(topic_prefix="dl", app_id="deliveries-test", state_dir=str(tmp_path))
    app: Any = CheckpointApp("deliveries-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    ch = Channels.of(app, settings)
    app.gpuhint_commits = (ch.job_topic, lambda partition: 7)
    producer = _HeldProducer()
    app.producer = producer
    failures: list[str] = []
    deliveries = getattr(app, "gpuhint_deliveries", None)
    if deliveries is not None:  # the test must not exit the process
        deliveries.on_failure = lambda what, exc: failures.append(what)
    consumer = app._new_consumer()
    committed: list[dict[Any, int]] = []

    async def commit_to_broker(offsets: Any) -> bool:
        committed.append(dict(offsets))
        return True

    consumer._commit = commit_to_broker
    consumer.assignment = lambda: {TP(ch.job_topic, 0)}
    consumer.commit_wait_s = 0.2
    return consumer, ch, producer, committed, failures


def test_a_commit_waits_until_the_saved_state_is_acknowledged(tmp_path: Path) -> None:
    async def main() -> None:
        consumer, ch, producer, committed, _ = _worker_edge(tmp_path)
        ch.vc_table.put("c/v", b"state", 0)  # the VC's save: its events are released
        assert await consumer.force_commit() is False
        assert committed == []  # not past events whose state is not in Kafka yet
        producer.pending[0].set_result(None)  # the broker acknowledged it
        assert await consumer.force_commit() is True
        assert committed == [{TP(ch.job_topic, 0): 7}]

    asyncio.run(main())


def test_a_refused_state_record_stops_the_worker_before_the_commit(tmp_path: Path) -> None:
    async def main() -> None:
        consumer, ch, producer, committed, failures = _worker_edge(tmp_path)
        ch.vc_table.put("c/v", b"state", 0)
        producer.pending[0].set_exception(TopicAuthorizationFailedError())
        await asyncio.sleep(0)
        assert await consumer.force_commit() is False
        assert committed == [] and failures == ["changelog record"]

    asyncio.run(main())


def test_a_refused_forward_stops_the_worker_before_the_commit(tmp_path: Path) -> None:
    async def main() -> None:
        consumer, ch, producer, committed, failures = _worker_edge(tmp_path)
        await ch.emit(Outcome(forwards=(Forward("t", b"c", b"{}"),)))
        producer.pending[0].set_exception(TopicAuthorizationFailedError())
        await asyncio.sleep(0)
        assert await consumer.force_commit() is False
        assert committed == [] and failures == ["forwarded record"]

    asyncio.run(main())


def test_the_producer_takes_the_largest_dead_letter_the_settings_allow(tmp_path: Path) -> None:
    """GPUHINT_DEAD_LETTER_MAX_BYTES over Faust's 1,000,000-byte request limit (a broker
    whose max.message.bytes was raised): a record that large was refused by the producer
    itself, the job-event agent crashed on it, and every restart crashed on it again."""
    from aiokafka import AIOKafkaProducer

    from gpuhint.cores.pipeline.dead_letter import dead_letter_record
    from streams.faust_io import make_faust_app

    settings = load_settings(
        topic_prefix="dl", state_dir=str(tmp_path), dead_letter_max_bytes=2_000_000
    )
    record = dead_letter_record("too big", "t", 0, 5, b"c/v", b"x" * 3_000_000, max_bytes=2_000_000)
    assert len(record) > 1_900_000
    app: Any = make_faust_app(settings)

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers="127.0.0.1:1",
            max_request_size=app.conf.producer_max_request_size,
        )
        producer._serialize(None, record, [])  # raised MessageSizeTooLarge

    asyncio.run(main())
