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
