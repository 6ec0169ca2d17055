"""Sampler on the fake NVML: guarded fields, lost GPUs, XIDs, MIG, all valid wire messages."""

from __future__ import annotations

from agents.fake_nvml import FakeNvml
from agents.nvml import DRIVER_NOT_LOADED, NvmlError
from agents.sampler import Sampler
from gpuhint.wire.contract import GpuSample, NodeStatus, decode_message, encode_message


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(scenario: str | dict, clock: Clock | None = None) -> tuple[FakeNvml, Sampler, Clock]:
    clock = clock or Clock()
    nv = FakeNvml(scenario, clock=clock)
    nv.init()
    nv.watch_xid()
    return nv, Sampler(nv, cluster="c1", node="gpu01", clock=clock), clock


def roundtrip(msgs: list) -> None:
    for m in msgs:
        assert decode_message(encode_message(m)) == m


def test_steady_node_reports_every_gpu_and_the_busy_ones() -> None:
    _, s, _ = make("steady")
    r = s.sample(running_jobs=["42"], samples_dropped=3)
    assert [g.gpu_index for g in r.gpu_samples] == list(range(8))
    st = r.status
    assert (st.num_gpus, st.busy_gpus, st.healthy) == (8, 4, True)
    assert st.running_jobs == ("42",) and st.samples_dropped == 3
    assert st.cluster == "c1" and st.node == "gpu01"
    g0 = r.gpu_samples[0]
    assert g0.gpu_util_pct and 60 <= g0.gpu_util_pct <= 70
    assert g0.mem_total_mb == 81920.0 and g0.mem_used_mb and g0.mem_used_mb > 0
    assert g0.power_w and g0.power_w > 60 and g0.energy_mj and g0.sm_clock_mhz == 1410
    assert len(g0.processes) == 1 and g0.processes[0].used_memory_mb
    assert r.gpu_samples[7].gpu_util_pct == 0 and r.gpu_samples[7].processes == ()
    assert r.gpu_samples[7].throttle_reasons == 0x1  # GpuIdle
    roundtrip([*r.gpu_samples, st])


def test_busy_node_all_gpus_busy_energy_counter_grows() -> None:
    _, s, clock = make("busy")
    first = s.sample()
    assert first.status.busy_gpus == 8
    clock.t += 10
    second = s.sample()
    e1 = first.gpu_samples[0].energy_mj
    e2 = second.gpu_samples[0].energy_mj
    assert e1 is not None and e2 is not None
    # 10 s at 300-400 W is 3-4 kJ
    assert 3.0e6 <= e2 - e1 <= 4.0e6


def test_lost_gpu_is_unhealthy_and_the_others_keep_being_sampled() -> None:
    _, s, clock = make("gpu-lost")
    for _ in range(3):
        r = s.sample()
        assert [g.gpu_index for g in r.gpu_samples] == [0, 1, 3, 4, 5, 6, 7]
        h = {x.gpu_index: x for x in r.status.gpu_health}
        assert not h[2].ok and "lost" in (h[2].error or "")
        assert all(h[i].ok for i in (0, 1, 3, 4, 5, 6, 7))
        assert r.status.num_gpus == 8 and not r.status.healthy
        clock.t += 10
    roundtrip([r.status])


def test_gpu_lost_midway_then_back() -> None:
    spec = {
        "gpus": 2,
        "util": [50, 50],
        "events": [{"at_s": 10, "until_s": 20, "gpu": 1, "lost": True}],
    }
    _, s, clock = make(spec)
    assert len(s.sample().gpu_samples) == 2
    clock.t += 10
    r = s.sample()
    assert len(r.gpu_samples) == 1 and not r.status.healthy
    clock.t += 10
    r = s.sample()
    assert len(r.gpu_samples) == 2 and r.status.healthy


def test_xid_is_surfaced_once_and_fatal_xid_marks_the_gpu_unhealthy() -> None:
    _, s, clock = make("xid")
    r = s.sample()
    assert r.gpu_samples[1].xid_errors == (13,)
    assert r.status.healthy  # XID 13 is an application error, not a sick GPU
    assert "xid 13" in (r.status.gpu_health[1].error or "")
    clock.t += 10
    r = s.sample()
    assert r.gpu_samples[1].xid_errors == ()
    clock.t += 25  # 35 s: XID 48 and an uncorrected ECC error on GPU 3
    r = s.sample()
    g3 = r.gpu_samples[3]
    assert g3.xid_errors == (48,) and g3.ecc_uncorrected == 1
    assert not r.status.healthy and not r.status.gpu_health[3].ok
    clock.t += 10
    r = s.sample()  # sticky: the GPU needs a reset
    assert r.gpu_samples[3].xid_errors == () and not r.status.gpu_health[3].ok


def test_a_field_error_gives_none_for_that_field_only() -> None:
    _, s, _ = make("field-errors")
    r = s.sample()
    g0, g1 = r.gpu_samples[0], r.gpu_samples[1]
    assert g0.temperature_c is None and g0.power_w is not None
    assert g1.power_w is None and g1.temperature_c is not None
    assert g1.gpu_util_pct is not None and g1.energy_mj is not None
    h = r.status.gpu_health
    assert h[0].ok and h[0].error is None  # Not Supported is not a problem
    assert h[1].ok and "power_mw" in (h[1].error or "")
    assert r.status.healthy
    roundtrip([g0, g1, r.status])


def test_mig_instances() -> None:
    _, s, _ = make("mig")
    r = s.sample()
    migs = r.gpu_samples[0].mig_instances
    assert [m.gpu_instance_id for m in migs] == [1, 2, 5]
    assert migs[0].profile == "3g.40gb" and migs[0].memory_total_mb == 40192
    assert r.gpu_samples[1].mig_instances == ()


def test_driver_gone_reports_every_known_gpu_unhealthy() -> None:
    nv, s, _ = make("steady")
    assert s.sample().status.healthy

    def boom() -> int:
        raise NvmlError(DRIVER_NOT_LOADED)

    nv.device_count = boom  # type: ignore[method-assign]
    r = s.sample()
    assert r.gpu_samples == [] and r.status.num_gpus == 8
    assert not r.status.healthy and all(not h.ok for h in r.status.gpu_health)
    assert [h.gpu_index for h in r.status.gpu_health] == list(range(8))  # every known GPU


def test_a_device_count_failing_from_the_first_sample_is_not_a_healthy_node() -> None:
    """With no GPU known yet, all([]) made a node whose driver fails 'healthy' (0 GPUs)."""
    nv, _, clock = make("steady")

    def boom() -> int:
        raise NvmlError(DRIVER_NOT_LOADED)

    nv.device_count = boom  # type: ignore[method-assign]
    r = Sampler(nv, cluster="c1", node="gpu01", clock=clock).sample()
    assert r.gpu_samples == [] and r.status.num_gpus == 0
    assert not r.status.healthy


def test_messages_are_the_wire_types() -> None:
    _, s, _ = make("steady")
    r = s.sample()
    assert all(isinstance(g, GpuSample) for g in r.gpu_samples)
    assert isinstance(r.status, NodeStatus)
