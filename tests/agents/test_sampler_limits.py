"""Nothing one GPU (or a long outage) reports stops the node's report (review 2026-12-07).

Values past the wire contract's bounds used to raise a ValidationError for the whole tick:
nothing was published, ever again in the case of ``samples_dropped``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.nvml import ProcessReading
from agents.publisher import BufferedPublisher, MemoryTransport
from agents.sampler import MAX_ERROR_CHARS, MAX_XIDS, Sampler
from gpuhint.wire.contract import (
    MAX_COUNT,
    GpuHealth,
    GpuProcess,
    GpuSample,
    NodeStatus,
    decode_message,
    encode_message,
)

SAMPLES, STATUS = "gpuhint.gpu-samples", "gpuhint.node-status"


def _agent(t: MemoryTransport, nv: Any, **kw: Any) -> NodeAgent:
    pub = BufferedPublisher(t, **kw)
    return NodeAgent(nvml=nv, publisher=pub, cluster="c", node="n1", clock=lambda: 100.0)


def _sampler(nv: FakeNvml) -> Sampler:
    nv.init()
    nv.watch_xid()
    return Sampler(nv, cluster="c", node="n", clock=lambda: 0.0)


def _topics(t: MemoryTransport) -> list[str]:
    return [r.topic for r in t.records]


def test_samples_dropped_saturates_at_the_contract_maximum() -> None:
    s = _sampler(FakeNvml("steady", clock=lambda: 0.0))
    st = s.sample(samples_dropped=MAX_COUNT + 10).status
    assert st.samples_dropped == MAX_COUNT
    assert decode_message(encode_message(st)) == st


def test_agent_keeps_publishing_after_a_million_drops() -> None:
    t = MemoryTransport()
    a = _agent(t, FakeNvml("steady", clock=lambda: 100.0), buffer_max=10)
    a.start()
    a.publisher.dropped = MAX_COUNT + 1  # a long Kafka outage
    a.publisher.publish("x", b"k", b"{}")  # one record still waiting from before
    a.run(threading.Event(), max_ticks=2)
    topics = _topics(t)
    assert topics.count(STATUS) == 2 and topics.count(SAMPLES) == 16 and "x" in topics


def test_tick_sends_what_is_buffered_even_when_sampling_fails() -> None:
    t = MemoryTransport()
    a = _agent(t, FakeNvml("steady", clock=lambda: 100.0))
    a.start()
    a.publisher.publish("x", b"k", b"{}")

    def boom(**_kw: Any) -> Any:
        raise RuntimeError("a bug")

    assert a.sampler is not None
    a.sampler.sample = boom  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        a.tick()
    assert _topics(t) == ["x"]


class BigPid(FakeNvml):
    def processes(self, index: int) -> list[ProcessReading]:
        return [ProcessReading(4_194_303, p.used_memory_bytes) for p in super().processes(index)]


def test_a_pid_above_a_million_is_valid() -> None:
    assert GpuProcess(pid=2**22).pid == 2**22  # Linux pid_max is at most 2**22
    with pytest.raises(ValueError):
        GpuProcess(pid=2**22 + 1)
    t = MemoryTransport()
    a = _agent(t, BigPid("steady", clock=lambda: 100.0))
    a.start()
    a.run(threading.Event(), max_ticks=1)
    assert _topics(t).count(SAMPLES) == 8 and _topics(t).count(STATUS) == 1


def test_nvml_64_bit_fields_are_valid() -> None:
    big = 2**64 - 1
    s = GpuSample(
        node="n", gpu_index=0, time=0.0, throttle_reasons=0x8000000000000000,
        ecc_corrected=big, ecc_uncorrected=big, xid_errors=(big,),
    )  # fmt: skip
    assert decode_message(encode_message(s)) == s
    with pytest.raises(ValueError):
        GpuSample(node="n", gpu_index=0, time=0.0, throttle_reasons=2**64)


class BadField(FakeNvml):
    """GPU 1 reports a temperature the contract rejects (a driver bug, a bad sensor)."""

    def temperature_c(self, index: int) -> int:
        return 10_000 if index == 1 else super().temperature_c(index)


def test_a_bad_field_costs_that_gpus_sample_only(caplog: pytest.LogCaptureFixture) -> None:
    s = _sampler(BadField("steady", clock=lambda: 0.0))
    with caplog.at_level(logging.ERROR, logger="agents.sampler"):
        r = s.sample()
        s.sample()
    assert [g.gpu_index for g in r.gpu_samples] == [0, 2, 3, 4, 5, 6, 7]
    h1 = r.status.gpu_health[1]
    assert h1.ok and "sample rejected: temperature_c" in (h1.error or "")
    assert s.rejected_samples == 2
    assert sum("GPU 1: sample rejected" in m for m in caplog.messages) == 1  # once per field


def test_an_xid_storm_is_deduplicated_and_the_tick_survives() -> None:
    events = [{"at_s": 0, "gpu": 0, "xid": 13}] * 300 + [{"at_s": 0, "gpu": 0, "xid": 31}]
    t = MemoryTransport()
    a = _agent(t, FakeNvml({"gpus": 2, "util": [50, 0], "events": events}, clock=lambda: 100.0))
    a.start()
    a.run(threading.Event(), max_ticks=1)
    msgs = [decode_message(r.value) for r in t.records]
    (g0,) = [m for m in msgs if isinstance(m, GpuSample) and m.gpu_index == 0]
    assert g0.xid_errors == (13, 31)  # order of first occurrence
    assert sum(isinstance(m, NodeStatus) for m in msgs) == 1


def test_distinct_xids_are_capped() -> None:
    events = [{"at_s": 0, "gpu": 0, "xid": x} for x in range(1, MAX_XIDS + 50)]
    s = _sampler(FakeNvml({"gpus": 1, "util": [0], "events": events}, clock=lambda: 0.0))
    (g0,) = s.sample().gpu_samples
    assert g0.xid_errors == tuple(range(1, MAX_XIDS + 1))


def test_a_lost_gpu_after_an_xid_storm_has_a_bounded_error() -> None:
    many = [{"at_s": 0, "gpu": 0, "xid": x} for x in range(10**9, 10**9 + MAX_XIDS)]
    events = [*many, {"at_s": 0, "gpu": 0, "lost": True}]
    s = _sampler(FakeNvml({"gpus": 2, "util": [50, 0], "events": events}, clock=lambda: 0.0))
    h0 = s.sample().status.gpu_health[0]
    assert not h0.ok and h0.error and len(h0.error) == MAX_ERROR_CHARS
    assert h0.error.startswith("GPU is lost (xid 1000000000, 1000000001")
    GpuHealth(gpu_index=0, ok=True, error="x" * MAX_ERROR_CHARS)  # the contract's bound


def test_running_jobs_the_contract_cannot_carry_are_left_out() -> None:
    s = _sampler(FakeNvml("steady", clock=lambda: 0.0))
    st = s.sample(running_jobs=["1", "x" * 300]).status
    assert st.running_jobs == ("1",)
