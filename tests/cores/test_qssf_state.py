"""The QSSF state's pickles name its module: states saved under the old paths still load."""

from __future__ import annotations

import pickle

import pytest

from gpuhint.cores.pipeline.state_table import MAGIC, decode_state
from gpuhint.cores.qssf import HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent
from models.history import HistoryEstimator


def _ev(phase: str, job: str, t: float, dur: float | None = None) -> JobEvent:
    return JobEvent(
        phase=phase, job_id=job, user="u", vc="v", num_gpus=2, time=t, submit_time=0,
        duration_s=dur,
    )  # fmt: skip


def _engine() -> HintEngine:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    for off, e in enumerate(
        [_ev("submitted", "a", 0), _ev("submitted", "b", 1), _ev("started", "a", 2)]
    ):
        engine.on_job_event(e, offset=off)
    return engine


@pytest.mark.parametrize("old", ["gpuhint.cores.qssf", "gpuhint.core"])
def test_a_state_saved_under_an_old_module_path_loads_and_goes_on(old: str) -> None:
    engine = _engine()
    blob = pickle.dumps(engine.states["default/v"], protocol=2)  # GLOBAL opcodes, no frames
    assert b"cgpuhint.cores.qssf_state\nVcState\n" in blob
    assert b"cgpuhint.cores.qssf_state\n_pending_job\n" in blob
    aged = blob.replace(b"cgpuhint.cores.qssf_state\n", f"c{old}\n".encode())
    assert b"qssf_state" not in aged
    st = decode_state(MAGIC + b"\x00" + aged)
    assert isinstance(st, VcState) and st.applied_offset == 2 and list(st.pending) == ["b"]
    assert st.pending["b"] == engine.states["default/v"].pending["b"]
    twin = HintEngine(HistoryEstimator, InMemoryStore(), states={"default/v": st})
    rest = [_ev("finished", "a", 12, dur=10), _ev("started", "b", 13)]
    for off, e in enumerate(rest, start=3):
        assert twin.on_job_event(e, offset=off) == engine.on_job_event(e, offset=off)
    assert twin.stats.learned == 1 and list(st.recent_finished) == ["a"]


def test_vcs_whose_names_join_alike_keep_states_of_their_own() -> None:
    """("a/b", "c") and ("a", "b/c") both join to "a/b/c": before, they shared one
    VcState (one model, one queue), so one VC's jobs moved the other's hints."""
    from gpuhint.cores.qssf import HintEngine, state_key
    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.wire.contract import JobEvent
    from models.history import HistoryEstimator

    assert state_key("a/b", "c") != state_key("a", "b/c")
    assert state_key("venus", "vc1") == "venus/vc1"  # ordinary names keep their keys
    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)
    for cluster, vc, job in (("a/b", "c", "x"), ("a", "b/c", "y")):
        engine.on_job_event(
            JobEvent(
                phase="submitted",
                job_id=job,
                cluster=cluster,
                vc=vc,
                num_gpus=1,
                time=1,
                submit_time=1,
            )
        )
    assert len(engine.states) == 2
    assert sorted(len(st.pending) for st in engine.states.values()) == [1, 1]
