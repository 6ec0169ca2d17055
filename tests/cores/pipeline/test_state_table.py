"""VcState in a table of bytes: codec, dirty tracking, forgetting on a rebalance, split
records of deep VCs, the bound on live states."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from gpuhint.cores.pipeline.partitioning import murmur2, partition_for
from gpuhint.cores.pipeline.state_table import (
    MAGIC,
    SPLIT_MAGIC,
    SplitHeader,
    StateCodecError,
    TableStates,
    decode_state,
    encode_state,
    is_part_key,
    owner_key,
)
from gpuhint.cores.qssf import HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase
from models.history import HistoryEstimator


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


def _deep_vc(states: TableStates, jobs: int, start: int = 0) -> VcState:
    """``jobs`` submitted jobs waiting in VC ``c/v`` (offsets from ``start``)."""
    engine = HintEngine(HistoryEstimator, InMemoryStore(), states=states, clock=lambda: 1.0)
    for i in range(start, start + jobs):
        ev = JobEvent(
            phase=JobPhase.SUBMITTED,
            job_id=f"j{i}",
            cluster="c",
            vc="v",
            user=f"u{i % 50}",
            num_gpus=1 + i % 8,
            time=float(i),
            submit_time=float(i),
        )
        engine.on_job_event(ev, offset=i)
    return states["c/v"]


def _parts(table: Mapping[str, bytes]) -> list[str]:
    return sorted(k for k in table if is_part_key(k))


def test_a_vc_with_25000_waiting_jobs_saves_under_the_record_limit_and_loads_back() -> None:
    table: dict[str, bytes] = {}
    writes: list[tuple[str, int]] = []

    def save(k: str, b: bytes) -> None:
        writes.append((k, len(b)))
        table[k] = b

    states = TableStates(table, on_save=save)
    st = _deep_vc(states, 25_000)
    assert states.save_dirty() == 1 and states.dirty == frozenset()
    limit = states.max_record_bytes
    assert limit == 512 * 1024 and max(n for _, n in writes) <= limit
    # the whole record would not fit a 1 MB broker: split into parts, then the header
    assert sum(n for k, n in writes if is_part_key(k)) > 1024 * 1024
    assert [k for k, _ in writes][-1] == "c/v" and all(is_part_key(k) for k, _ in writes[:-1])
    assert SplitHeader.decode(table["c/v"]) is not None and states.split_saves == 1
    assert all(owner_key(k) == "c/v" for k in table)

    back = TableStates(table)
    assert list(back) == ["c/v"] and len(back) == 1  # part keys are not VCs
    got = back["c/v"]
    assert set(got.pending) == set(st.pending) and len(got.pending) == 25_000
    assert got.applied_offset == st.applied_offset == 24_999
    assert back.get(_parts(table)[0]) is None  # a part key is no VC


class CrashingTable(dict[str, bytes]):
    """A backing that "crashes" (raises) at its ``crash_at``-th write or delete from now."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: int | None = None

    def _tick(self) -> None:
        if self.crash_at is not None:
            self.crash_at -= 1
            if self.crash_at <= 0:
                self.crash_at = None
                raise RuntimeError("worker killed")

    def __setitem__(self, key: str, value: bytes) -> None:
        self._tick()
        super().__setitem__(key, value)

    def pop(self, key: str, *default: Any) -> Any:
        self._tick()
        return super().pop(key, *default)


def test_a_crash_mid_save_leaves_a_readable_generation_and_the_next_save_cleans_up() -> None:
    table = CrashingTable()
    states = TableStates(table, max_record_bytes=4096)
    _deep_vc(states, 300)
    states.save_dirty()
    gen1 = _parts(table)
    assert len(gen1) >= 3 and all(":part:1:" in k for k in gen1)

    st = _deep_vc(states, 300, start=300)  # deeper: more parts in generation 2
    parts = -(-len(encode_state(st)) // 4096)
    assert parts > len(gen1)
    table.crash_at = 2  # killed after one part of generation 2
    with pytest.raises(RuntimeError):
        states.save_dirty()
    assert TableStates(table)["c/v"].applied_offset == 299  # generation 1, whole
    assert states.dirty == {"c/v"}  # not saved: still dirty

    table.crash_at = parts + 2  # every part of generation 2 and its header, then killed
    with pytest.raises(RuntimeError):  # ... before generation 1's parts are deleted
        states.save_dirty()
    assert TableStates(table)["c/v"].applied_offset == 599  # generation 2
    assert any(":part:1:" in k for k in _parts(table))  # generation 1 left behind

    later = TableStates(table, max_record_bytes=4096)  # a restarted worker, a later save
    st = later["c/v"]
    later["c/v"] = st
    assert later.save_dirty() == 1
    left = _parts(table)
    assert left and all(":part:3:" in k for k in left)  # 1 and 2 deleted
    assert set(TableStates(table)["c/v"].pending) == {f"j{i}" for i in range(600)}


def test_a_header_with_missing_or_corrupt_parts_starts_the_vc_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table: dict[str, bytes] = {}
    states = TableStates(table, max_record_bytes=4096)
    _deep_vc(states, 200)
    states.save_dirty()
    first, *_ = _parts(table)

    broken = dict(table)
    del broken[first]
    assert TableStates(broken).get("c/v") is None
    assert "part 0 of" in caplog.text and "starts from an empty state" in caplog.text

    flipped = dict(table)
    flipped[first] = bytes([flipped[first][0] ^ 1]) + flipped[first][1:]
    assert TableStates(flipped).get("c/v") is None and "checksum" in caplog.text

    # the VC goes on from an empty state; its next save supersedes the broken generation
    fresh = TableStates(broken, max_record_bytes=4096)
    fresh["c/v"] = VcState(model=HistoryEstimator(), applied_offset=7)
    fresh.save_dirty()
    assert _parts(broken) == [] and TableStates(broken)["c/v"].applied_offset == 7


def test_whole_records_still_load_and_a_vc_that_shrinks_drops_its_parts() -> None:
    table: dict[str, bytes] = {"c/v": encode_state(VcState(model=HistoryEstimator()))}
    states = TableStates(table, max_record_bytes=4096)
    _deep_vc(states, 200)  # on top of a GHVS1 record
    states.save_dirty()
    assert _parts(table) and table["c/v"].startswith(SPLIT_MAGIC)
    states["c/v"] = VcState(model=HistoryEstimator())  # every job gone
    states.save_dirty()
    assert _parts(table) == [] and table["c/v"].startswith(MAGIC)
    assert TableStates(table)["c/v"].pending == {}
    del states["c/v"]
    assert table == {}


def test_changelog_table_sends_parts_and_tombstones_on_the_vc_partition() -> None:
    from streams.faust_io import ChangelogTable

    class FakeFaustTable:
        def __init__(self) -> None:
            self.data: dict[str, bytes] = {}
            self.sent: list[tuple[int, str, bytes | None]] = []

        def get(self, key: str) -> bytes | None:
            return self.data.get(key)

        def keys(self) -> Iterable[str]:
            return self.data.keys()

        def __len__(self) -> int:
            return len(self.data)

        def send_changelog(self, partition: int, key: str, value: bytes | None, **_: Any) -> None:
            self.sent.append((partition, key, value))

    fake = FakeFaustTable()
    vc_table = ChangelogTable(fake)
    partition_of = {"c/v": 5}
    states = TableStates(
        vc_table,
        on_save=lambda k, b: vc_table.put(k, b, partition_of[TableStates.owner_key(k)]),
        on_delete=lambda k: vc_table.delete(k, partition_of[TableStates.owner_key(k)]),
        max_record_bytes=2048,
    )
    _deep_vc(states, 100)
    states.save_dirty()
    _deep_vc(states, 100, start=100)
    states.save_dirty()
    assert {p for p, _, _ in fake.sent} == {5}
    tombstones = [k for _, k, v in fake.sent if v is None]
    assert tombstones and all(":part:1:" in k for k in tombstones)
    assert not any(":part:1:" in k for k in fake.data)
    assert list(states) == ["c/v"] and len(TableStates(vc_table)["c/v"].pending) == 200


# -- the LRU bound on live states ----------------------------------------------------------


def test_live_states_are_bounded_least_recently_used_clean_ones_evicted() -> None:
    table: dict[str, bytes] = {}
    states = TableStates(table, max_live=4)
    for i in range(4):
        states[f"c/v{i}"] = VcState(model=HistoryEstimator(), applied_offset=i)
    states.save_dirty()
    states["c/v0"]  # used: v1 is now the least recently used
    assert states.get("c/new") is None
    states["c/v4"] = VcState(model=HistoryEstimator(), applied_offset=4)
    assert states.live_keys() == ["c/v2", "c/v3", "c/v0", "c/v4"] and states.evictions == 1
    assert states["c/v1"].applied_offset == 1  # decoded again from the table
    assert states.live == 4 and "c/v1" in states.live_keys()
    assert sorted(states) == [f"c/v{i}" for i in range(5)]


def test_dirty_and_encoding_states_are_never_evicted() -> None:
    table: dict[str, bytes] = {}
    states = TableStates(table, max_live=2)
    for i in range(5):  # all dirty: over the bound, kept
        states[f"c/v{i}"] = VcState(model=HistoryEstimator(), applied_offset=i)
    assert states.live == 5 and states.evictions == 0
    pickled = states.pickle_dirty(["c/v0"])  # c/v0's snapshot is being compressed
    states.store_encoded(states.seal_all(states.pickle_dirty(["c/v1", "c/v2", "c/v3"])))
    states["c/v5"] = VcState(model=HistoryEstimator(), applied_offset=5)
    assert set(states.live_keys()) == {"c/v0", "c/v4", "c/v5"}  # v1..v3 clean: evicted
    assert states.store_encoded(states.seal_all(pickled)) == 1
    states.save_dirty()
    assert states.get("c/v1") is not None and states.live <= 2
    assert [TableStates(table)[f"c/v{i}"].applied_offset for i in range(6)] == list(range(6))


def test_many_vcs_keep_bookkeeping_bounded() -> None:
    table: dict[str, bytes] = {}
    states = TableStates(table, max_live=32)
    for i in range(2000):
        key = f"c/v{i}"
        st = states.get(key) or VcState(model=HistoryEstimator())
        st.applied_offset = i
        states[key] = st
        assert states.live <= 32 + 50  # the bound, and at most the 50 dirty since the save
        if i % 50 == 49:
            states.save_dirty()
    states.save_dirty()
    assert states.get("c/v0") is not None  # clean ones are evicted at the next use
    assert states.live <= 32 and len(table) == len(states) == 2000
    assert not states._changes and not states._encoded_at and not states.dirty
    assert TableStates(table)["c/v1234"].applied_offset == 1234
