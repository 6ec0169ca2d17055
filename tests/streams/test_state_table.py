"""VcState in a table of bytes: codec, dirty tracking, forgetting on a rebalance."""

from __future__ import annotations

import pytest

from gpuhint.core import VcState
from models.history import HistoryEstimator
from streams.partitioning import murmur2, partition_for
from streams.state_table import (
    SaveCadence,
    StateCodecError,
    TableStates,
    decode_state,
    encode_state,
)


def test_codec_round_trip_and_compression() -> None:
    m = HistoryEstimator()
    m.state.update({f"c|a|u|{i}": [1.0, 2.0, 3.0, 4.0] for i in range(2000)})
    st = VcState(model=m, applied_offset=12)
    raw, small = encode_state(st, compress=False), encode_state(st)
    assert len(small) < len(raw) / 3
    for blob in (raw, small):
        back = decode_state(blob)
        assert back.applied_offset == 12 and back.model.state == m.state  # type: ignore[attr-defined]


@pytest.mark.parametrize("blob", [b"", b"pickle", b"GHVS1\x01garbage"])
def test_codec_rejects_what_it_did_not_write(blob: bytes) -> None:
    with pytest.raises(StateCodecError):
        decode_state(blob)


def test_only_dirty_keys_are_saved_and_forget_drops_unsaved_changes() -> None:
    table: dict[str, bytes] = {}
    saved: list[str] = []
    states = TableStates(table, on_save=lambda k, b: (saved.append(k), table.__setitem__(k, b)))
    states["c/a"] = VcState(model=HistoryEstimator())
    states["c/b"] = VcState(model=HistoryEstimator())
    assert states.save_dirty() == 2 and states.save_dirty() == 0
    st = states["c/a"]
    st.applied_offset = 5
    states["c/a"] = st
    assert states.dirty == {"c/a"} and states.save_dirty() == 1
    assert saved == ["c/a", "c/b", "c/a"]
    st.applied_offset = 99
    states["c/a"] = st
    states.forget()  # a rebalance before the batch was saved
    assert states["c/a"].applied_offset == 5 and states.dirty == frozenset()


def test_an_unreadable_record_starts_the_vc_afresh() -> None:
    states = TableStates({"c/a": b"junk"})
    assert states.get("c/a") is None


def test_partitioner_matches_kafka_clients() -> None:
    from kafka.partitioner.default import murmur2 as kafka_murmur2

    for key in [b"", b"a", b"ab", b"abc", b"philly/vcA", "venus/vcé".encode()]:
        assert murmur2(key) == kafka_murmur2(key)
    assert {partition_for(f"c/vc{i}".encode(), 8) for i in range(64)} == set(range(8))


def test_save_cadence_holds_acks_until_saved() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    assert not c.due()  # nothing held
    c.hold(["a"], "c/v")
    now[0] = 0.5
    c.hold(["b"], "c/v")
    assert not c.due() and acked == []  # oldest held 0.5 s < 1 s
    now[0] = 1.0
    assert c.due() and c.due_keys() == ["c/v"]
    assert c.saved() == 2
    assert acked == ["a", "b"] and c.held == 0 and not c.due()
    c.hold([], "c/v")  # an empty batch starts no clock
    now[0] = 5.0
    assert not c.due()


def test_save_cadence_is_per_vc_oldest_first() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    c.hold(["a1"], "c/a")
    now[0] = 0.6
    c.hold(["b1"], "c/b")
    c.hold(["a2"], "c/a")  # joins c/a's clock (started at 0)
    now[0] = 1.2
    assert c.due_keys() == ["c/a"] and c.keys() == ["c/a", "c/b"]
    assert c.saved(["c/a"]) == 2 and acked == ["a1", "a2"] and c.held == 1
    c.hold(["a3"], "c/a")  # a new clock for c/a, after c/b's
    now[0] = 1.6
    assert c.due_keys() == ["c/b"] and c.keys() == ["c/b", "c/a"]
    assert c.saved() == 2 and acked == ["a1", "a2", "b1", "a3"]


def test_save_cadence_drop_never_acks() -> None:
    acked: list[str] = []
    c: SaveCadence[str] = SaveCadence(acked.append, 0.0)
    c.hold(["a", "b"], "c/a")
    c.hold(["x"], "c/b")
    assert c.due()  # interval 0: every batch
    assert c.drop() == 3
    assert c.saved() == 0 and acked == []


def test_encode_then_store_is_save_dirty() -> None:
    table: dict[str, bytes] = {}
    states = TableStates(table)
    for i in range(3):
        states[f"c/v{i}"] = VcState(model=HistoryEstimator(), applied_offset=i)
    encoded = states.encode_dirty()
    assert table == {} and len(states.dirty) == 3  # encoding alone writes nothing
    assert states.store_encoded(encoded) == 3
    assert states.dirty == frozenset() and sorted(table) == ["c/v0", "c/v1", "c/v2"]
    assert TableStates(table)["c/v2"].applied_offset == 2
    states["c/v0"] = VcState(model=HistoryEstimator(), applied_offset=9)
    states["c/v1"] = VcState(model=HistoryEstimator(), applied_offset=9)
    assert [k for k, _ in states.encode_dirty(["c/v1", "c/other"])] == ["c/v1"]  # one VC


def test_a_change_after_the_snapshot_keeps_the_key_dirty() -> None:
    """The worker compresses a snapshot off the lock while batches go on: a VC changed
    meanwhile must stay dirty, or its next save would write nothing and acknowledge
    events whose state is in no record."""
    table: dict[str, bytes] = {}
    states = TableStates(table)
    states["c/a"] = VcState(model=HistoryEstimator(), applied_offset=1)
    pickled = states.pickle_dirty(["c/a"])
    states["c/a"] = VcState(model=HistoryEstimator(), applied_offset=2)  # a batch meanwhile
    assert states.store_encoded(states.seal_all(pickled)) == 1
    assert TableStates(table)["c/a"].applied_offset == 1 and states.dirty == {"c/a"}
    assert states.save_dirty() == 1 and states.dirty == frozenset()
    assert TableStates(table)["c/a"].applied_offset == 2


def test_save_cadence_take_then_ack_leaves_later_items_held() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    c.hold(["a1", "a2"], "c/a")
    taken = c.take("c/a")  # the snapshot of c/a is being taken
    now[0] = 0.5
    c.hold(["a3"], "c/a")  # handled while it is compressed: a new clock
    assert c.ack(taken) == 2 and acked == ["a1", "a2"] and c.held == 1
    now[0] = 1.2
    assert not c.due()  # a3's clock started at 0.5
    now[0] = 1.5
    assert c.due_keys() == ["c/a"]
