"""The lean fetch loop's pieces: inline first step, finishing a suspended callback,
and the version gate. (The loop itself runs in every worker e2e test.)"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import faust
import pytest
from faust.transport import consumer as faust_consumer
from faust.types import TP
from mode.utils.queues import FlowControlQueue

from streams import faust_consumer as lean
from streams.faust_consumer import (
    CheckpointApp,
    CheckpointConsumer,
    LeanApp,
    LeanConsumer,
    app_class,
    finish,
    run_inline,
)


async def _no_wait(log: list[str]) -> str:
    log.append("ran")
    return "done"


async def _put(queue: asyncio.Queue[int], value: int) -> None:
    await queue.put(value)


def test_run_inline_finishes_a_callback_that_does_not_suspend() -> None:
    log: list[str] = []
    done, waiting_on = run_inline(_no_wait(log))
    assert (done, waiting_on, log) == (True, None, ["ran"])


def test_run_inline_raises_the_callbacks_error() -> None:
    async def boom() -> None:
        raise ValueError("bad message")

    with pytest.raises(ValueError, match="bad message"):
        run_inline(boom())


def test_a_callback_that_suspends_is_finished_in_order() -> None:
    async def main() -> list[int]:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        queue.put_nowait(1)
        coro = _put(queue, 2)  # the queue is full: suspends on the putter future
        done, waiting_on = run_inline(coro)
        assert not done and isinstance(waiting_on, asyncio.Future)
        task = asyncio.ensure_future(finish(coro, waiting_on))
        await asyncio.sleep(0)
        assert not task.done()
        got = [await queue.get()]  # frees the slot: the put completes
        await asyncio.wait_for(task, 1)
        got.append(queue.get_nowait())
        return got

    assert asyncio.run(main()) == [1, 2]


def test_finish_passes_a_bare_yield_and_the_result_through() -> None:
    async def two_steps() -> int:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return 7

    async def main() -> int:
        coro = two_steps()
        done, waiting_on = run_inline(coro)
        assert not done and waiting_on is None
        return await finish(coro, waiting_on)

    assert asyncio.run(main()) == 7


def test_finish_delivers_the_awaited_futures_error_into_the_callback() -> None:
    async def main() -> str:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def waits() -> str:
            try:
                await fut
            except KeyError:
                return "handled"
            return "no error"

        coro = waits()
        _, waiting_on = run_inline(coro)
        task = asyncio.ensure_future(finish(coro, waiting_on))
        fut.set_exception(KeyError("x"))
        return await task

    assert asyncio.run(main()) == "handled"


def test_cancelling_finish_cancels_the_callback_at_its_await() -> None:
    seen: list[str] = []

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        queue.put_nowait(1)

        async def put() -> None:
            try:
                await queue.put(2)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        coro = put()
        _, waiting_on = run_inline(coro)
        task = asyncio.ensure_future(finish(coro, waiting_on))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert queue.qsize() == 1  # the cancelled put left nothing behind
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_app_class_uses_the_lean_consumer_only_on_checked_versions(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert app_class(False) is CheckpointApp
    assert app_class(True) is (LeanApp if lean.lean_fetch_supported() else CheckpointApp)
    assert issubclass(LeanApp, CheckpointApp) and issubclass(LeanConsumer, CheckpointConsumer)
    monkeypatch.setattr(faust, "__version__", "99.0.0")
    with caplog.at_level("WARNING"):
        assert app_class(True) is CheckpointApp
    assert "not one the lean fetch loop was checked against" in caplog.text


def test_the_installed_faust_is_a_checked_version() -> None:
    """A Faust upgrade must re-check the copied loop (then extend CHECKED_VERSIONS)."""
    assert faust.__version__ in lean.CHECKED_VERSIONS


def test_the_copied_loop_still_matches_fausts_own() -> None:
    """The lean loop mirrors Faust's ``_drain_messages``: the attributes it reads exist
    and Faust's loop still delivers through ``wait_first`` (what the lean path skips)."""
    source = inspect.getsource(faust_consumer.Consumer._drain_messages)
    assert "self.wait_first(" in source and "callback(message)" in source
    for name in ("_read_offset", "_commit_every", "_add_gap", "_buffered_partitions"):
        assert name in inspect.getsource(faust_consumer.Consumer), name
    assert hasattr(faust_consumer, "CONSUMER_FETCHING")


def test_lean_app_builds_a_lean_consumer() -> None:
    app: Any = LeanApp("lean-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    consumer = app._new_consumer()
    assert isinstance(consumer, LeanConsumer)
    consumer.on_buffer_drop(TP("t", 0))
    assert consumer._buffer_dropped.is_set()


class _Offsets:
    """What ``Consumer._new_offset`` reads of a consumer, without one."""

    def __init__(self, committed: int, acked: list[int], commits: Any = None) -> None:
        from collections import defaultdict

        from intervaltree import IntervalTree

        self.tp = TP("gpuhint.job-events", 0)
        self._acked: Any = defaultdict(list, {self.tp: list(acked)})
        self._acked_index: Any = defaultdict(set, {self.tp: set(acked)})
        self._gap: Any = defaultdict(IntervalTree)
        self._committed_offset: Any = defaultdict(lambda: None, {self.tp: committed})
        self.app = type("App", (), {"gpuhint_commits": commits})()


def test_fausts_own_commit_skips_an_offset_still_held() -> None:
    """Why the worker commits its own offsets: offset 10 is held (its VC's state not yet
    saved) while 11..13 are acknowledged, and faust-streaming 0.15 commits 14 -- a
    worker killed now never sees offset 10 again (faust-streaming #596/#606)."""
    c = _Offsets(committed=10, acked=[11, 12, 13])
    assert faust_consumer.Consumer._new_offset(c, c.tp) == 14  # type: ignore[arg-type]


def test_the_checkpoint_consumer_commits_what_the_routine_says() -> None:
    asked: list[int] = []

    def committable(partition: int) -> int:
        asked.append(partition)
        return 10  # the routine: offset 10 is still held

    c = _Offsets(committed=10, acked=[11, 12, 13], commits=("gpuhint.job-events", committable))
    assert CheckpointConsumer._new_offset(c, c.tp) == 10  # type: ignore[arg-type]
    assert asked == [0] and c._acked[c.tp] == [] and not c._acked_index[c.tp]
    # another topic keeps Faust's own logic
    other = _Offsets(committed=3, acked=[3, 4], commits=("elsewhere", committable))
    assert CheckpointConsumer._new_offset(other, other.tp) == 5  # type: ignore[arg-type]


def _committing_consumer(committable: dict[int, int], committed: list[Any]) -> Any:
    """A :class:`CheckpointConsumer` (no broker) holding job-event partition 1; its
    commits to the broker succeed (``committed`` records them) unless one is refused."""
    app: Any = CheckpointApp("ckpt-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    app.gpuhint_commits = ("jobs", committable.get)
    consumer: Any = app._new_consumer()
    consumer.refuse = False

    async def commit_to_broker(offsets: Any) -> bool:
        if consumer.refuse:  # Faust's answer to "the group has already rebalanced"
            return False
        committed.append(dict(offsets))
        return True

    async def flush() -> None:
        pass

    consumer._commit = commit_to_broker
    consumer.assignment = lambda: {TP("jobs", 1)}
    app.producer.flush = flush
    return consumer


def test_a_refused_commit_is_sent_again_though_no_event_comes() -> None:
    """The two-worker stall of the kill storm: a partition's last events are handled, the
    one commit that carries them is refused (a rebalance under way), and no event comes
    after. Faust records the refused offset as committed and then never sends it (it
    commits only past that record, and only partitions with a newer acknowledgement);
    the checkpoint consumer sends what the routine says until the broker took it."""
    tp, committed = TP("jobs", 1), []
    consumer = _committing_consumer({1: 11_820}, committed)
    consumer._committed_offset[tp] = 11_069  # the group's commit when the partition came
    consumer.refuse = True
    assert asyncio.run(consumer.force_commit()) is False
    assert consumer._committed_offset[tp] == 11_820  # Faust's record: as if on the broker
    assert faust_consumer.Consumer._should_commit(consumer, tp, 11_820) is False
    assert not consumer._acked.get(tp)  # and nothing acknowledged to commit
    consumer.refuse = False
    assert asyncio.run(consumer.force_commit()) is True
    assert committed == [{tp: 11_820}]
    assert asyncio.run(consumer.force_commit()) is False  # on the broker: not sent again
    consumer.commit_refresh_s = 0.0
    assert asyncio.run(consumer.force_commit()) is True  # ... until the refresh is due
    assert committed == [{tp: 11_820}, {tp: 11_820}]


def test_a_job_partition_with_nothing_to_commit_sends_nothing() -> None:
    committed: list[Any] = []
    consumer = _committing_consumer({}, committed)  # the routine has handled nothing
    assert asyncio.run(consumer.force_commit()) is False and committed == []


class _FakeAiokafka:
    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = assigned
        self.seeks: list[tuple[TP, int]] = []

    def assignment(self) -> set[TP]:
        return self.assigned

    def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


def test_seek_if_assigned_seeks_only_an_assigned_partition() -> None:
    fake = _FakeAiokafka({TP("jobs", 1)})
    assert asyncio.run(lean.seek_if_assigned(fake, TP("jobs", 1), 7)) is True
    assert asyncio.run(lean.seek_if_assigned(fake, TP("jobs", 2), 9)) is False
    assert fake.seeks == [(TP("jobs", 1), 7)]


def test_a_seek_runs_in_the_consumer_thread() -> None:
    """aiokafka's seek changes the fetcher's records; called from the worker's thread
    while the consumer's thread iterates them it raised KeyError in
    Fetcher.fetched_records. The checkpoint consumer hands the seek to that thread."""
    fake = _FakeAiokafka({TP("jobs", 1)})
    calls: list[Any] = []

    class Thread:
        def _ensure_consumer(self) -> _FakeAiokafka:
            return fake

        def seek(self, tp: TP, offset: int) -> None:  # Faust's direct call: must not be used
            raise AssertionError("seek called outside the consumer's thread")

        async def call_thread(self, fun: Any, *args: Any) -> Any:
            calls.append(fun)
            return await fun(*args)

    app: Any = CheckpointApp("seek-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    consumer: Any = app._new_consumer()
    consumer._thread = Thread()
    asyncio.run(consumer.seek(TP("jobs", 1), 42))
    asyncio.run(consumer.seek(TP("jobs", 3), 5))  # revoked meanwhile: skipped, no error
    assert calls == [lean.seek_if_assigned] * 2
    assert fake.seeks == [(TP("jobs", 1), 42)]
    assert consumer._read_offset[TP("jobs", 1)] == 42


def test_seek_to_redeliver_marks_then_seeks_an_assigned_partition() -> None:
    tp = TP("jobs", 1)
    fake = _FakeAiokafka({tp})
    marks: dict[TP, int] = {}
    assert asyncio.run(lean.seek_to_redeliver(fake, tp, 2, marks.__setitem__)) is True
    assert fake.seeks == [(tp, 2)] and marks == {tp: 2}
    assert asyncio.run(lean.seek_to_redeliver(fake, TP("jobs", 2), 0, marks.__setitem__)) is False
    assert fake.seeks == [(tp, 2)]


class _ThreadOf:
    """A started consumer thread that runs calls inline, over a fake aiokafka consumer."""

    def __init__(self, fake: _FakeAiokafka) -> None:
        self.fake = fake
        self._started = asyncio.Event()
        self._started.set()

    def _ensure_consumer(self) -> _FakeAiokafka:
        return self.fake

    def assignment(self) -> set[TP]:
        return self.fake.assignment()

    async def call_thread(self, fun: Any, *args: Any) -> Any:
        return await fun(*args)


def test_a_fetch_queued_then_cleared_at_resume_is_fetched_and_delivered_again() -> None:
    """Issue 21's skipped offsets after an assignment. Faust's recovery resumes the
    partitions, seeks them to the commit (3) and then clears the stream queues; a
    fetch drained before that seek (3..4141) is queued after it, then cleared, and
    delivering it moved Faust's read offset to 4141 while the position is back at 3.
    Before: the position said nothing was fetched past the worker's next offset (18),
    so no seek, and the fetch again from 3 skipped 18..4140 as already read (a gap)."""
    tp = TP("jobs", 1)
    fake = _FakeAiokafka({tp})

    async def scenario() -> tuple[bool, list[bool], list[bool], Any]:
        app: Any = LeanApp("hold-test", broker="kafka://127.0.0.1:1", autodiscover=False)
        consumer: Any = app._new_consumer()
        app._consumer = consumer
        consumer._thread = _ThreadOf(fake)
        app.gpuhint_commits = ("jobs", lambda p: None)
        consumer._read_offset[tp] = 4141  # the stale fetch was delivered, then cleared

        async def redeliver() -> None:
            await consumer.redeliver_from(tp, 18)

        app.gpuhint_redeliver = redeliver
        app.flow_control.resume()  # clears the queues; holds the job partitions at once
        held = consumer._read_offset[tp] is None
        # what the fetch loop still iterates of the stale fetch is dropped
        stale = [consumer._fetched_before_seek(tp, o) for o in (4000, 4141)]
        for _ in range(3):
            await asyncio.sleep(0)
        again = [consumer._fetched_before_seek(tp, o) for o in (3, 18, 19)]
        return held, stale, again, consumer._read_offset[tp]

    held, stale, again, read = asyncio.run(scenario())
    assert held and stale == [True, True]
    assert fake.seeks == [(tp, 18)]  # sought though the position was not past 18
    assert again == [True, False, False]  # 3..17 dropped (fetched before), 18 on
    assert read == 18  # Faust's loop skips only what is below its read offset


def test_a_partition_with_nothing_to_deliver_again_is_released() -> None:
    tp = TP("jobs", 1)
    app: Any = LeanApp("release-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    consumer: Any = app._new_consumer()
    consumer._thread = _ThreadOf(_FakeAiokafka({tp}))
    app.gpuhint_commits = ("jobs", lambda p: None)
    consumer.hold_job_partitions()
    assert consumer._fetched_before_seek(tp, 0) is True
    consumer.release(tp)
    assert consumer._fetched_before_seek(tp, 0) is False
    consumer.hold_job_partitions()
    fake = consumer._thread.fake
    fake.assigned = set()  # revoked meanwhile: not sought, not held
    assert asyncio.run(consumer.redeliver_from(tp, 5)) is False
    assert consumer._fetched_before_seek(tp, 7) is False and fake.seeks == []


def test_each_flow_resume_runs_the_redelivery_after_faust_clears_its_queues() -> None:
    """Faust clears every stream queue each time flow resumes; the checkpoint app then
    runs ``gpuhint_redeliver`` (the worker seeks back what was dropped)."""

    async def scenario() -> tuple[int, list[int]]:
        app: Any = CheckpointApp("resume-test", broker="kafka://127.0.0.1:1", autodiscover=False)
        queue = FlowControlQueue(maxsize=10, flow_control=app.flow_control, clear_on_resume=True)
        queue.put_nowait(1)
        seen: list[int] = []

        async def redeliver() -> None:
            seen.append(queue.qsize())  # runs after the clear

        app.gpuhint_redeliver = redeliver
        app.flow_control.resume()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return queue.qsize(), seen

    assert asyncio.run(scenario()) == (0, [0])


def test_a_message_that_waited_through_a_flow_resume_is_dropped_not_delivered() -> None:
    """The rest of issue 21's gaps: the fetch loop waits with a message of a partition
    whose stream buffer is full; flow resumes, Faust clears the queues (which ends the
    wait) and the partition is held. Before, the message was delivered after the
    clear, ahead of everything cleared before it, and Faust's read offset moved past
    the offsets the seek delivers again."""
    tp = TP("jobs", 2)

    async def scenario() -> tuple[list[int], Any]:
        app: Any = LeanApp("wait-test", broker="kafka://127.0.0.1:1", autodiscover=False)
        consumer: Any = app._new_consumer()
        consumer._thread = _ThreadOf(_FakeAiokafka({tp}))
        app.gpuhint_commits = ("jobs", lambda p: None)
        delivered: list[int] = []

        async def callback(message: Any) -> None:
            delivered.append(message.offset)

        async def wait_for_drop() -> None:  # the clear drains the buffer: flow resumed
            consumer.hold_job_partitions()

        consumer.callback = callback
        consumer._wait_for_buffer_drop = wait_for_drop
        consumer._buffered_partitions.add(tp)
        consumer._read_offset[tp] = 71
        message = type("Message", (), {"offset": 3280, "topic": "jobs"})()
        await consumer._take(tp, message)
        return delivered, consumer._read_offset[tp]

    assert asyncio.run(scenario()) == ([], None)
