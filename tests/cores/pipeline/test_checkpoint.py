"""The batch routine's checkpoint order: offsets admitted in order, gaps sought back,
commits never past an event whose state is not saved; and a kill storm in process."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from gpuhint.cores.pipeline.checkpoint import BatchRoutine, ListEdge
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.contract import JobEvent, encode_message
from models.history import HistoryEstimator

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"


def _msg(offset: int, vc: str = "a", job: str | None = None, partition: int = 0) -> Message:
    ev = JobEvent(
        phase="submitted", job_id=job or f"j{offset}", vc=vc, num_gpus=1, time=0, submit_time=0
    )
    return Message(
        "gpuhint.job-events", partition, offset, f"default/{vc}".encode(), encode_message(ev)
    )


def _routine(
    edge: ListEdge, interval_s: float = 0.0, now: list[float] | None = None
) -> tuple[BatchRoutine[Message], InMemoryStore]:
    store = InMemoryStore()
    states = TableStates({})
    handler = MessageHandler(HintEngine(HistoryEstimator, store, states=states))
    clock = (lambda: now[0]) if now is not None else None
    routine: BatchRoutine[Message] = BatchRoutine(
        handler, states, edge, flush=store.flush, save_interval_s=interval_s, clock=clock
    )
    return routine, store


def test_a_skipped_offset_is_sought_back_and_nothing_past_it_is_applied() -> None:
    edge = ListEdge(committed={0: 0})
    routine, store = _routine(edge)
    asyncio.run(routine.run_batch([_msg(0), _msg(1), _msg(4), _msg(5)]))
    assert edge.seeks == [(0, 2)] and routine.stats.gaps == 1
    assert routine.committable(0) == 2  # never past what was handled
    assert [j for j, _ in store.queue("default", "a")] == ["j0", "j1"]
    asyncio.run(routine.run_batch([_msg(5), _msg(2), _msg(3), _msg(4), _msg(5)]))
    assert routine.stats.discarded == 3  # 4 and 5 before the seek, 5 again after it
    assert routine.committable(0) == 6
    assert [j for j, _ in store.queue("default", "a")] == ["j0", "j1", "j2", "j3", "j4", "j5"]


def test_a_seek_back_not_answered_is_asked_again() -> None:
    """A fetch under way when the seek was asked can deliver past it (and the consumer
    then drops the re-read offsets as old): the routine asks again after a while."""
    now = [0.0]
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, now=now)
    asyncio.run(routine.run_batch([_msg(0), _msg(3)]))
    assert edge.seeks == [(0, 1)]
    now[0] = 1.0
    assert asyncio.run(routine.reseek_stalled(after_s=2.0)) == 0
    now[0] = 2.5
    assert asyncio.run(routine.reseek_stalled(after_s=2.0)) == 1
    assert edge.seeks == [(0, 1), (0, 1)]
    asyncio.run(routine.run_batch([_msg(1), _msg(2), _msg(3)]))
    assert asyncio.run(routine.reseek_stalled(after_s=0.0)) == 0  # answered: no more
    assert routine.committable(0) == 4


def test_offsets_the_log_lacks_are_passed_over() -> None:
    edge = ListEdge(committed={0: 0}, log={0: [0, 1, 5, 6]})  # 2..4: transaction markers
    routine, _ = _routine(edge)
    asyncio.run(routine.run_batch([_msg(0), _msg(1), _msg(5), _msg(6)]))
    assert (routine.stats.holes, routine.stats.gaps, edge.seeks) == (1, 0, [])
    assert routine.committable(0) == 7


def test_an_offset_below_the_commit_or_seen_again_is_not_applied() -> None:
    edge = ListEdge(committed={0: 3})
    routine, store = _routine(edge)
    asyncio.run(routine.run_batch([_msg(2), _msg(3), _msg(3)]))
    assert routine.stats.seen == 2
    assert [j for j, _ in store.queue("default", "a")] == ["j3"]
    assert len(edge.acked) == 3  # every event is released


def test_the_commit_stops_at_the_oldest_event_whose_state_is_unsaved() -> None:
    """VC a's event (offset 0) is held while VC b's (offset 1) is saved: Faust's own
    logic would commit 2 here, and a crash would lose offset 0."""
    now = [0.0]
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, interval_s=1.0, now=now)
    asyncio.run(routine.run_batch([_msg(0, vc="a"), _msg(1, vc="b")]))
    assert routine.committable(0) == 0
    asyncio.run(routine.save(["default/b"]))
    assert routine.committable(0) == 0 and [m.offset for m in edge.acked] == [1]
    asyncio.run(routine.save(["default/a"]))
    assert routine.committable(0) == 2


def test_forget_drops_held_events_and_offsets() -> None:
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, interval_s=1.0, now=[0.0])
    asyncio.run(routine.run_batch([_msg(0), _msg(1)]))
    assert routine.forget() == 2
    assert routine.committable(0) is None and not edge.acked


def test_the_tick_releases_held_events_after_the_last_event() -> None:
    """No event comes after the last batch: the timer's tick alone saves the VCs when
    their cadence is due, and the commit reaches the end of the partition."""
    now = [0.0]
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, interval_s=1.0, now=now)
    asyncio.run(routine.run_batch([_msg(0, vc="a"), _msg(1, vc="b")]))
    now[0] = 0.9
    asyncio.run(routine.tick(0.05))
    assert routine.committable(0) == 0 and not edge.acked  # not due yet
    now[0] = 1.0
    for _ in range(2):  # paced: at least one due VC a tick
        asyncio.run(routine.tick(0.05))
    assert routine.committable(0) == 2 and len(edge.acked) == 2


def test_an_urgent_tick_saves_every_held_vc_at_once() -> None:
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, interval_s=60.0, now=[0.0])
    asyncio.run(routine.run_batch([_msg(0, vc="a"), _msg(1, vc="b"), _msg(2, vc="c")]))
    asyncio.run(routine.tick(0.05, urgent=True))  # a rebalance or a stop
    assert routine.committable(0) == 3 and not routine.cadence.held


def test_a_save_overtaken_by_a_rebalance_leaves_no_offset_open() -> None:
    """A rebalance drops the live state while a VC's snapshot is being sealed: that save
    writes nothing and acknowledges nothing; the partition, assigned here again, is
    redelivered from its commit and its commit reaches the end."""
    edge = ListEdge(committed={0: 0})
    routine, _ = _routine(edge, interval_s=60.0, now=[0.0])

    async def scenario() -> None:
        sealing, go_on = asyncio.Event(), asyncio.Event()

        async def offload(fn: object, *args: object) -> object:
            if getattr(fn, "__name__", "") == "seal_all":
                sealing.set()
                await go_on.wait()
            return fn(*args)  # type: ignore[operator]

        routine.offload = offload
        await routine.run_batch([_msg(0), _msg(1)])
        save = asyncio.create_task(routine.save_all())
        await sealing.wait()
        assert routine.forget() == 0  # the two events were taken by the save
        go_on.set()
        await save
        assert not edge.acked and routine.committable(0) is None
        await routine.run_batch([_msg(0), _msg(1), _msg(2)])  # from the commit again
        await routine.tick(0.05, urgent=True)
        assert routine.committable(0) == 3 and len(edge.acked) == 3

    asyncio.run(scenario())


# -- the kill storm, in process: the same routine, killed anywhere ---------------------


@pytest.fixture(scope="module")
def all_events() -> list[JobEvent]:
    return job_events(read_trace(TRACE).jobs, cluster="philly")


@pytest.fixture(scope="module")
def events(all_events: list[JobEvent]) -> list[JobEvent]:
    return all_events[: int(len(all_events) * 0.8)]


def _pipeline(events: list[JobEvent], save_every: int) -> InProcessPipeline:
    p = InProcessPipeline("history_mix", partitions=4, batch_max=25, save_every=save_every)
    p.publish(events)
    return p


def _learned(p: InProcessPipeline, probes: list[JobEvent]) -> dict[tuple[str, str], float]:
    """What each VC's saved model predicts for every submitted job of the trace: a model
    that learned an event twice, or missed one, predicts differently."""
    states = TableStates(p.table)
    out = {}
    for ev in probes:
        st = states.get(f"{ev.cluster}/{ev.vc}")
        if st is not None:
            out[(ev.vc, ev.job_id)] = st.model.predict(ev).expected_s
    return out


@pytest.fixture(scope="module")
def reference(events: list[JobEvent]) -> InProcessPipeline:
    p = _pipeline(events, save_every=1)
    p.run(workers=1)
    return p


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kill_storm_with_held_acknowledgements_changes_nothing(
    all_events: list[JobEvent], events: list[JobEvent], reference: InProcessPipeline, seed: int
) -> None:
    rng = random.Random(seed)
    p = _pipeline(events, save_every=4)  # acknowledgements held over several batches
    for _ in range(15):  # each run dies at a random step of a random batch
        crash = rng.choice(["after_handle", "after_flush", "after_save"])
        p.run(workers=rng.choice([1, 2]), max_batches=rng.randint(1, 8), crash=crash)  # type: ignore[arg-type]
    assert sum(p.committed) < len(events)
    p.run(workers=2)
    assert p.pending_hints() == reference.pending_hints()
    assert p.queues() == reference.queues()
    probes = [e for e in all_events if e.phase == "submitted"]
    assert _learned(p, probes) == _learned(reference, probes)


def test_committing_past_a_held_event_would_lose_it(
    all_events: list[JobEvent], events: list[JobEvent]
) -> None:
    """The kill storm can fail: commit the last handled offset (as Faust's own logic
    may) and a crash before the save loses the held events' learning."""
    p = _pipeline(events, save_every=4)
    ref = _pipeline(events, save_every=4)
    ref.run(workers=1)

    def naive_commit(w: object) -> None:
        for part, pos in w.position.items():  # type: ignore[attr-defined]
            p.committed[part] = max(p.committed[part], pos)

    p._commit = naive_commit  # type: ignore[method-assign]
    for _ in range(6):
        p.run(workers=1, max_batches=7, crash="after_flush")
    p.run(workers=1)
    probes = [e for e in all_events if e.phase == "submitted"]
    assert p.pending_hints() != ref.pending_hints() or _learned(p, probes) != _learned(ref, probes)


def test_more_unsaved_vcs_than_the_live_bound_are_saved_at_once() -> None:
    """Backpressure: an unsaved state cannot be evicted, so a batch that leaves more VCs
    with unsaved changes than half the live bound saves the oldest of them at once."""
    edge = ListEdge(committed={0: 0})
    store = InMemoryStore()
    states = TableStates({}, max_live=20)
    handler = MessageHandler(HintEngine(HistoryEstimator, store, states=states))
    routine: BatchRoutine[Message] = BatchRoutine(
        handler, states, edge, flush=store.flush, save_interval_s=60.0, clock=lambda: 0.0
    )
    asyncio.run(routine.run_batch([_msg(o, vc=f"v{o}") for o in range(50)]))
    assert len(routine.cadence.keys()) == 10  # the 40 oldest saved, their events released
    assert [m.offset for m in edge.acked] == list(range(40))
    assert routine.committable(0) == 40


def test_redelivery_offset_is_where_the_routine_must_be_delivered_from() -> None:
    """After the driver dropped queued events (Faust clears its stream queues when flow
    resumes), a partition is delivered again from what the routine has not handled:
    its seek target, its next offset, else the commit, else the log's first offset."""
    edge = ListEdge(committed={1: 40}, log={0: [5, 6, 7], 1: [40, 41], 2: [3, 4], 3: []})
    routine, _ = _routine(edge, interval_s=30.0)
    asyncio.run(routine.run_batch([_msg(5), _msg(6)]))  # partition 0: 5 and 6 handled
    assert asyncio.run(routine.redelivery_offset(0)) == 7
    assert asyncio.run(routine.redelivery_offset(1)) == 40  # nothing handled: its commit
    assert asyncio.run(routine.redelivery_offset(2)) == 3  # no commit: the log's first
    assert asyncio.run(routine.redelivery_offset(3)) is None  # an empty log
    routine.partitions[0].seeking = 2  # a seek back under way: its target
    assert asyncio.run(routine.redelivery_offset(0)) == 2


def test_events_dropped_before_the_routine_took_them_are_not_lost() -> None:
    """The stall of issue 21's CI run: a fresh group (no commit) got its backlog
    queued, Faust cleared the queue when flow resumed, and the partition waited for
    offsets that never came again. Re-delivering from :meth:`redelivery_offset`
    handles every event once, as an uninterrupted run."""
    edge = ListEdge(committed={}, log={0: list(range(10))})
    routine, _ = _routine(edge)
    msgs = [_msg(o, job=f"j{o}") for o in range(10)]
    asyncio.run(routine.run_batch(msgs[:2]))  # 2..9 were queued, then dropped
    start = asyncio.run(routine.redelivery_offset(0))
    assert start == 2
    asyncio.run(routine.run_batch(msgs[start:]))
    assert routine.committable(0) == 10 and routine.stats.seen == 0
    assert len(edge.acked) == 10


def test_a_never_committed_partition_starts_at_the_log_start() -> None:
    """No commit yet (a fresh group): the gap guard holds from the first event. A fetch
    race that delivers 5.. first is sought back to the log's first offset, 0."""
    edge = ListEdge(committed={}, log={0: list(range(10))})
    routine, store = _routine(edge)
    msgs = [_msg(o, job=f"j{o}") for o in range(10)]
    asyncio.run(routine.run_batch(msgs[5:]))
    assert edge.seeks == [(0, 0)] and routine.stats.gaps == 1
    assert routine.committable(0) == 0 and store.queue("default", "a") == []
    asyncio.run(routine.run_batch(msgs))
    assert routine.committable(0) == 10 and len(store.queue("default", "a")) == 10


def test_a_log_that_starts_later_is_not_a_gap() -> None:
    edge = ListEdge(committed={}, log={0: [7, 8]})  # 0..6 deleted by retention
    routine, _ = _routine(edge)
    asyncio.run(routine.run_batch([_msg(7), _msg(8)]))
    assert edge.seeks == [] and routine.committable(0) == 9


def test_a_commit_that_cannot_be_read_holds_the_partition() -> None:
    """The broker busy: the partition's start is unknown, so nothing is applied (a first
    delivery past the commit would move the commit over offsets never handled); the
    partition is sought back to the event and asks again when it comes."""
    now = [0.0]
    edge = ListEdge(committed={0: 2}, failing_reads=2)
    routine, store = _routine(edge, now=now)
    msgs = [_msg(o, job=f"j{o}") for o in range(8)]
    asyncio.run(routine.run_batch(msgs[4:]))  # 2 and 3 were skipped on the way
    assert edge.seeks == [(0, 4)] and routine.stats.held == 1
    assert routine.committable(0) is None and store.queue("default", "a") == []
    asyncio.run(routine.run_batch(msgs[4:]))  # at once: not asked again yet
    assert edge.seeks == [(0, 4)] and routine.stats.held == 1
    now[0] = 2.5
    asyncio.run(routine.reseek_stalled())
    assert edge.seeks[-1] == (0, 4)
    asyncio.run(routine.run_batch(msgs[4:]))  # asked again: fails again
    assert routine.stats.held == 2 and routine.committable(0) is None
    now[0] = 5.0
    asyncio.run(routine.run_batch(msgs[4:]))  # read: 2, so 2..3 are sought back
    assert edge.seeks[-1] == (0, 2) and routine.stats.gaps == 1
    asyncio.run(routine.run_batch(msgs[2:]))
    assert routine.committable(0) == 8
    assert [j for j, _ in store.queue("default", "a")] == [f"j{o}" for o in range(2, 8)]


def test_a_seek_back_to_an_offset_retention_deleted_moves_on_to_the_log_start() -> None:
    """Retention deleted the offset a seek back waits for before it was fetched again:
    the consumer resumes at the log's start, so that offset never comes. Asked again,
    the routine seeks to the first offset the log holds instead of waiting forever
    (every event discarded, the commit stuck for the life of the process)."""
    now = [0.0]
    edge = ListEdge(committed={0: 0}, log={0: [0, 1, 2, 3, 4]})
    routine, store = _routine(edge, now=now)
    msgs = [_msg(o, job=f"j{o}") for o in range(5)]
    asyncio.run(routine.run_batch([msgs[0], msgs[3]]))
    assert edge.seeks == [(0, 1)]
    edge.log = {0: [3, 4]}  # 1 and 2 deleted by retention
    now[0] = 2.5
    assert asyncio.run(routine.reseek_stalled()) == 1
    assert edge.seeks[-1] == (0, 1)  # first asked again as it was
    asyncio.run(routine.run_batch(msgs[3:]))  # the consumer resumed at the log's start
    assert routine.committable(0) == 1
    now[0] = 5.0
    assert asyncio.run(routine.reseek_stalled()) == 1
    assert edge.seeks[-1] == (0, 3)  # not 1 again: the log starts at 3 now
    asyncio.run(routine.run_batch(msgs[3:]))
    assert routine.committable(0) == 5 and routine.stats.holes == 1
    assert [j for j, _ in store.queue("default", "a")] == ["j0", "j3", "j4"]
