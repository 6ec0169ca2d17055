"""The one message path, without Kafka: decode, check, apply, say what to emit."""

from __future__ import annotations

import json

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker
from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobRoster, NodeStatus, encode_message
from gpuhint.wire.topics import Topics, cluster_key, job_key
from models.history import HistoryEstimator

T = Topics("t")


def handler(ces: bool = True) -> MessageHandler:
    store = InMemoryStore()
    proc = ClusterLoadProcessor(ClusterLoadTracker(slot_s=60), CesEngine(store)) if ces else None
    return MessageHandler(HintEngine(HistoryEstimator, store), T, proc)


def job(phase: str = "submitted", **kw: object) -> JobEvent:
    base: dict[str, object] = dict(job_id="j", vc="a", cluster="c", time=0, submit_time=0)
    base.update(kw)
    return JobEvent(phase=phase, **base)  # type: ignore[arg-type]


def msg(value: bytes | None, key: bytes | None = b"c/a", topic: str = T.job_events) -> Message:
    return Message(topic, 2, 9, key, value)


def test_valid_event_writes_a_hint_and_names_its_state() -> None:
    h = handler()
    out = h.job_event(msg(encode_message(job())))
    assert out.hint is not None and out.state_key == "c/a" and out.dead_letter is None
    assert h.engine.states["c/a"].applied_offset == 9
    assert h.stats.processed == 1


def test_bad_messages_are_dead_lettered_with_where_and_why() -> None:
    h = handler()
    for value, key, why in [
        (None, b"c/a", "empty message"),
        (b"{nope", b"c/a", "JSON"),
        (encode_message(job()), b"c/b", "per-VC state must stay on one partition"),
    ]:
        out = h.job_event(msg(value, key))
        assert out.reason is not None and why in out.reason, out.reason
        rec = json.loads(out.dead_letter or b"")
        assert (rec["topic"], rec["partition"], rec["offset"]) == (T.job_events, 2, 9)
    assert h.stats.dead_letter == 3 and h.stats.processed == 0
    h.engine.store.flush()
    assert h.engine.store.counters()["dead_letter"] == 3


def test_placements_are_forwarded_to_the_cluster_topic_only_with_ces() -> None:
    started = encode_message(job("started", nodes=("n1",)))
    fw = handler().job_event(msg(started)).forwards
    assert [(f.topic, f.key) for f in fw] == [(T.cluster_telemetry, cluster_key("c"))]
    assert handler(ces=False).job_event(msg(started)).forwards == ()
    assert handler().job_event(msg(encode_message(job()))).forwards == ()  # a submit


def test_node_status_is_rekeyed_and_telemetry_feeds_ces() -> None:
    h = handler()
    ns = encode_message(NodeStatus(cluster="c", node="n1", time=0, num_gpus=8))
    out = h.node_status(msg(ns, key=b"c/n1", topic=T.node_status))
    assert [f.key for f in out.forwards] == [b"c"]
    assert h.node_status(msg(encode_message(job()), topic=T.node_status)).reason
    assert h.telemetry(msg(ns, key=b"c", topic=T.cluster_telemetry)).dead_letter is None
    assert h.ces is not None and "c" in h.ces.dirty


def test_dispatch_by_topic() -> None:
    h = handler()
    assert h.handle(msg(encode_message(job()), key=job_key("c", "a"))).hint is not None
    assert "unexpected topic" in (h.handle(msg(b"x", topic="other")).reason or "")


def test_the_job_aware_ces_gets_every_job_event_and_the_submit_hint() -> None:
    from gpuhint.cores.pipeline.cluster_load import make_processor
    from gpuhint.wire.contract import PriorityHint, decode_message

    store = InMemoryStore()
    h = MessageHandler(HintEngine(HistoryEstimator, store), T, make_processor(store, policy="jobs"))
    out = h.job_event(msg(encode_message(job(num_gpus=8))))
    assert [f.key for f in out.forwards] == [cluster_key("c")] * 2
    ev, hint = (decode_message(f.value) for f in out.forwards)
    assert isinstance(ev, JobEvent) and isinstance(hint, PriorityHint)
    assert out.hint is not None and hint.predicted_duration_s == out.hint.predicted_duration_s
    for f in out.forwards:  # the telemetry path takes both
        assert h.telemetry(Message(f.topic, 0, 0, f.key, f.value)).dead_letter is None
    assert h.ces is not None and h.ces.jobs is not None
    assert h.ces.jobs.cluster("c").head_gpus() == 8
    finished = encode_message(job("finished", time=5, state="CANCELLED"))
    assert len(h.job_event(msg(finished)).forwards) == 1  # no placement, still forwarded


def test_telemetry_keyed_by_another_cluster_is_dead_lettered() -> None:
    """The CES checkpoint of a cluster goes to the partition its key came on: a record
    keyed otherwise would leave its cluster's checkpoint without one (the worker used to
    crash there, and again on every redelivery)."""
    from gpuhint.cores.pipeline.cluster_load import processor_from_settings
    from gpuhint.cores.pipeline.state_table import owner_key
    from gpuhint.wire.config import Settings

    settings, store = Settings(), InMemoryStore()
    ces_partition: dict[str, int] = {}
    table: dict[str, bytes] = {}

    def on_save(k: str, blob: bytes) -> None:  # as streams/app.py::_ces_processor
        table[k] = blob
        _ = ces_partition[owner_key(k)]

    ces = processor_from_settings(settings, store, checkpoints=table, on_save=on_save)
    h = MessageHandler(HintEngine(HistoryEstimator, store), settings.topics, ces)
    ns = encode_message(NodeStatus(cluster="venus", node="n1", time=100, num_gpus=8))
    for key in (b"other", None):
        m = Message(settings.topics.cluster_telemetry, 2, 0, key, ns)
        if m.key is not None:  # what the cluster-load agent does before handling
            ces_partition[m.key.decode(errors="replace")] = m.partition
        out = h.telemetry(m)
        assert out.dead_letter is not None and (out.reason or "").startswith("key "), out
        assert "is not the record's cluster b'venus'" in (out.reason or "")
    ces.checkpoint_dirty()  # nothing of venus to save: no partition needed
    assert table == {} and h.stats.dead_letter == 2


def test_a_key_that_is_not_utf8_survives_in_the_dead_letter() -> None:
    import base64

    key = b"default/\xff"
    out = handler().job_event(msg(b"not json", key=key))
    rec = json.loads(out.dead_letter or b"")
    assert rec["key"] is None and base64.b64decode(rec["key_b64"]) == key


def test_a_long_key_with_the_smallest_record_limit_is_dead_lettered() -> None:
    """A 1,000-byte key of control characters (6 bytes each in JSON) named twice (key
    and reason) used to make the record builder raise at 4,096 bytes: the batch failed
    and the partition stopped on that message for ever."""
    import asyncio

    from gpuhint.cores.pipeline.checkpoint import BatchRoutine, ListEdge
    from gpuhint.cores.pipeline.state_table import TableStates
    from gpuhint.wire.config import Settings

    settings = Settings(dead_letter_max_bytes=4096)  # the setting's own minimum
    store, states = InMemoryStore(), TableStates({})
    h = MessageHandler(
        HintEngine(HistoryEstimator, store, states=states),
        dead_letter_max_bytes=settings.dead_letter_max_bytes,
    )
    edge = ListEdge(committed={0: 0})
    routine = BatchRoutine(h, states, edge, flush=store.flush, save_interval_s=0)
    bad = Message("gpuhint.job-events", 0, 0, b"\x01" * 1000, encode_message(job()))
    asyncio.run(routine.run_batch([bad]))
    (out,) = edge.emitted
    assert out.dead_letter is not None and len(out.dead_letter) <= 4096
    assert json.loads(out.dead_letter)["key_truncated"] is True
    assert routine.committable(0) == 1  # released: the partition goes on


def test_dead_letter_reasons_are_counted_in_a_bounded_set_of_entries() -> None:
    """A producer keying job events by job id (or sending ever new schema versions,
    kinds, duplicate names) made every dead letter a new ``stats.reasons`` entry: the
    worker's memory grew with each one, for ever."""
    from gpuhint.metrics.reasons import reason_class

    h = handler()
    for i in range(200):
        h.job_event(msg(encode_message(job(job_id=str(i))), key=str(i).encode()))
        h.job_event(msg(json.dumps({"schema_version": i + 2}).encode()))
        h.job_event(msg(json.dumps({"schema_version": 1, "kind": f"k{i}"}).encode()))
        h.job_event(msg(f'{{"schema_version":1,"x{i}":1,"x{i}":2}}'.encode()))
        h.job_event(msg(b"x" * (300_000 + i)))
        extra = json.loads(encode_message(job()))
        extra[f"field{i}"] = 1  # named by the sender: "field{i}: Extra inputs ..."
        h.job_event(msg(json.dumps(extra).encode()))
    assert h.stats.dead_letter == 1200 and sum(h.stats.reasons.values()) == 1200
    assert len(h.stats.reasons) <= 101, len(h.stats.reasons)
    assert h.stats.reasons["key b"] == 200, sorted(h.stats.reasons)
    classes = {reason_class(r) for r in h.stats.reasons}  # the metric's classes still
    assert {"wrong_key", "schema_version", "wrong_kind"} <= classes, h.stats.reasons


def test_rosters_retire_jobs_and_forward_their_ends_to_ces() -> None:
    h = handler()
    h.job_event(msg(encode_message(job(num_gpus=8))))
    out = None
    for offset, epoch in ((10, 60.0), (11, 120.0)):
        roster = encode_message(JobRoster(cluster="c", vc="a", epoch=epoch))
        out = h.job_event(Message(T.job_events, 2, offset, b"c/a", roster))
        assert out.dead_letter is None and out.state_key == "c/a"
    assert out is not None and [f.key for f in out.forwards] == [b"c"]
    ended = JobEvent.model_validate_json(out.forwards[0].value)
    assert (ended.job_id, ended.phase.value, ended.state) == ("j", "finished", "UNKNOWN")
    assert h.engine.states["c/a"].pending == {} and h.engine.states["c/a"].applied_offset == 11
    assert handler(ces=False).job_event(msg(encode_message(job()))).forwards == ()


def test_a_roster_keyed_by_another_vc_or_of_another_kind_is_dead_lettered() -> None:
    h = handler()
    roster = encode_message(JobRoster(cluster="c", vc="b", epoch=60.0))
    assert "per-VC state" in (h.job_event(msg(roster)).reason or "")
    ns = encode_message(NodeStatus(cluster="c", node="n1", time=0, num_gpus=8))
    assert "expected kind 'job' or 'job_roster'" in (h.job_event(msg(ns)).reason or "")


def test_a_retired_running_job_frees_its_nodes_in_the_job_aware_ces() -> None:
    from gpuhint.cores.pipeline.cluster_load import make_processor

    store = InMemoryStore()
    h = MessageHandler(HintEngine(HistoryEstimator, store), T, make_processor(store, policy="jobs"))

    def through(m: Message) -> None:
        for f in h.job_event(m).forwards:  # as the worker: telemetry in turn
            assert h.telemetry(Message(f.topic, 0, 0, f.key, f.value)).dead_letter is None

    through(msg(encode_message(job(num_gpus=8))))
    through(msg(encode_message(job("started", time=5, start_time=5, num_gpus=8, nodes=("n1",)))))
    assert h.ces is not None and h.ces.jobs is not None
    assert list(h.ces.jobs.cluster("c").running) == ["j"]
    for offset, epoch in ((20, 60.0), (21, 120.0)):
        roster = encode_message(JobRoster(cluster="c", vc="a", epoch=epoch))
        through(Message(T.job_events, 2, offset, b"c/a", roster))
    assert h.ces.jobs.cluster("c").running == {}  # its node is no longer held busy
