"""RealNvml: the no-library message, and pynvml errors mapped per field (on a stub module)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from agents.nvml import GPU_IS_LOST, NOT_SUPPORTED, TIMEOUT, NvmlError, NvmlUnavailable, RealNvml
from agents.sampler import Sampler


def _nvml_loads() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_loads(), reason="this host has a working NVML")
def test_no_nvml_library_gives_a_clear_message() -> None:
    with pytest.raises(NvmlUnavailable) as exc:
        RealNvml().init()
    msg = str(exc.value)
    assert "NVML Shared Library Not Found" in msg
    assert "nvidia-ml-py" in msg and "NVIDIA driver" in msg and "--nvml fake" in msg


def test_missing_pynvml_module_gives_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py"):
        RealNvml().init()


class StubError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def stub_pynvml(lost: set[int], no_temp: set[int]) -> Any:
    """Just enough of pynvml's API, with the same names and return shapes."""
    m: Any = types.ModuleType("pynvml")
    m.NVMLError = StubError
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_CLOCK_SM = 1
    m.NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    m.NVML_VOLATILE_ECC = 0
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.nvmlEventTypeXidCriticalError = 8
    events = [types.SimpleNamespace(device=("h", 1), eventType=8, eventData=79)]

    def dev(h: tuple[str, int]) -> int:
        if h[1] in lost:
            raise StubError(GPU_IS_LOST)
        return h[1]

    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlDeviceGetCount = lambda: 3
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]}"  # str in nvidia-ml-py >= 11.5
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=dev(h) * 10, memory=5)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=80 << 30, free=70 << 30, used=(10 << 30) + dev(h) * 0
    )
    m.nvmlDeviceGetPowerUsage = lambda h: 250_000 + dev(h)
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: 123_456_789 + dev(h)

    def temp(h: tuple[str, int], sensor: int) -> int:
        if dev(h) in no_temp:
            raise StubError(NOT_SUPPORTED)
        return 55

    m.nvmlDeviceGetTemperature = temp
    m.nvmlDeviceGetClockInfo = lambda h, kind: 1980 + dev(h) * 0
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4 + dev(h) * 0
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: kind + dev(h) * 0
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=4242, usedGpuMemory=dev(h) * 0 + (2 << 30))
    ]

    def mig_mode(h: tuple[str, int]) -> list[int]:
        dev(h)
        raise StubError(NOT_SUPPORTED)

    m.nvmlDeviceGetMigMode = mig_mode
    m.nvmlEventSetCreate = lambda: "set"
    m.nvmlDeviceRegisterEvents = lambda h, kinds, s: dev(h) and None

    def wait(s: str, timeout_ms: int) -> Any:
        if events:
            return events.pop()
        raise StubError(TIMEOUT)

    m.nvmlEventSetWait = wait
    m.nvmlEventSetFree = lambda s: None
    return m


def test_real_nvml_maps_errors_per_field_and_reads_xid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", stub_pynvml(lost={2}, no_temp={0}))
    nv = RealNvml()
    nv.init()
    nv.watch_xid()
    assert nv.driver_version() == "550.54.15" and nv.device_count() == 3
    assert nv.power_mw(1) == 250_001 and nv.mig_instances(0) == []
    with pytest.raises(NvmlError) as exc:
        nv.temperature_c(0)
    assert exc.value.code == NOT_SUPPORTED and not exc.value.lost
    with pytest.raises(NvmlError) as exc:
        nv.utilization(2)
    assert exc.value.lost

    r = Sampler(nv, cluster="c", node="n", clock=lambda: 0.0).sample()
    assert [g.gpu_index for g in r.gpu_samples] == [0, 1]
    g0, g1 = r.gpu_samples
    assert g0.temperature_c is None and g1.temperature_c == 55
    assert g1.power_w == pytest.approx(250.001) and g1.mem_total_mb == 80 * 1024
    assert g1.throttle_reasons == 0x4 and g1.ecc_uncorrected == 1 and g1.ecc_corrected == 0
    assert g1.processes[0].pid == 4242 and g1.processes[0].used_memory_mb == 2048
    assert g1.xid_errors == (79,)
    assert not r.status.gpu_health[1].ok  # XID 79: fell off the bus
    assert not r.status.gpu_health[2].ok and "lost" in (r.status.gpu_health[2].error or "")
    nv.shutdown()


def test_a_failing_event_wait_keeps_the_xids_already_drained(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    m = stub_pynvml(lost=set(), no_temp=set())
    events = [types.SimpleNamespace(device=("h", 1), eventType=8, eventData=79)]

    def wait(s: str, timeout_ms: int) -> Any:
        if events:
            return events.pop()
        raise StubError(GPU_IS_LOST)  # nvmlEventSetWait: a GPU fell off the bus

    m.nvmlEventSetWait = wait
    monkeypatch.setitem(sys.modules, "pynvml", m)
    nv = RealNvml()
    nv.init()
    nv.watch_xid()
    r = Sampler(nv, cluster="c", node="n", clock=lambda: 0.0).sample()
    (g1,) = [g for g in r.gpu_samples if g.gpu_index == 1]
    assert g1.xid_errors == (79,) and not r.status.gpu_health[1].ok
    assert any("reading XID events: GPU is lost (kept 1 drained)" in x for x in caplog.messages)


def test_an_xid_of_a_gpu_whose_uuid_cannot_be_read_still_marks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = stub_pynvml(lost=set(), no_temp=set())
    lost: set[int] = set()

    def uuid(h: tuple[str, int]) -> str:
        if h[1] in lost:
            raise StubError(GPU_IS_LOST)
        return f"GPU-{h[1]}"

    m.nvmlDeviceGetUUID = uuid
    monkeypatch.setitem(sys.modules, "pynvml", m)
    nv = RealNvml()
    nv.init()
    nv.watch_xid()  # XID 79 on GPU 1 pending...
    lost.add(1)  # ... and GPU 1 has fallen off the bus: its UUID no longer reads
    r = Sampler(nv, cluster="c", node="n", clock=lambda: 0.0).sample()
    h1 = r.status.gpu_health[1]
    assert not h1.ok and h1.error == "GPU is lost (xid 79)"


def test_pynvml_handles_map_by_the_address_they_point_at() -> None:
    import ctypes

    from agents.nvml import _handle_key

    class Dev(ctypes.Structure):
        pass

    raw = (ctypes.c_char * 8)()
    a, b = ctypes.cast(raw, ctypes.POINTER(Dev)), ctypes.cast(raw, ctypes.POINTER(Dev))
    assert a is not b and _handle_key(a) == _handle_key(b)  # an event's handle is a new object


def test_a_driver_older_than_the_bindings_still_gives_processes_and_throttle_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvidia-ml-py >= 12.535 calls C functions that drivers before R535 (R470, R525...)
    lack: the sample crashed on processes and throttle_reasons stayed None."""
    m = stub_pynvml(lost=set(), no_temp=set())

    class NVMLLibraryMismatchError(Exception):  # what pynvml raises for a missing _v3
        pass

    def v3(h: tuple[str, int]) -> Any:
        raise NVMLLibraryMismatchError("Unversioned function called ...")

    def event_reasons(h: tuple[str, int]) -> int:
        raise StubError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND: no such symbol in this driver

    m.NVMLLibraryMismatchError = NVMLLibraryMismatchError
    m.nvmlDeviceGetComputeRunningProcesses = v3
    m.nvmlDeviceGetComputeRunningProcesses_v2 = lambda h: [
        types.SimpleNamespace(pid=77, usedGpuMemory=1 << 30)
    ]
    m.nvmlDeviceGetCurrentClocksEventReasons = event_reasons
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x8
    monkeypatch.setitem(sys.modules, "pynvml", m)
    nv = RealNvml()
    nv.init()
    r = Sampler(nv, cluster="c", node="n", clock=lambda: 0.0).sample()
    g0 = r.gpu_samples[0]
    assert g0.processes[0].pid == 77 and g0.processes[0].used_memory_mb == 1024
    assert g0.throttle_reasons == 0x8
    assert r.status.gpu_health[0].ok and r.status.gpu_health[0].error is None


def test_a_mig_gpu_read_without_privileges_still_shows_its_processes_and_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In MIG mode NVML gives no utilization, and the whole GPU's processes only to a
    privileged caller (the shipped units run as a user): a GPU whose every instance ran
    a job was reported idle (busy_gpus 0) with "processes: Insufficient Permissions"."""
    m = stub_pynvml(lost=set(), no_temp=set())
    parent = {("h", 0)}

    def util(h: Any) -> Any:
        if h in parent:
            raise StubError(NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=0, memory=0)

    def procs(h: Any) -> list[Any]:
        if h in parent:
            raise StubError(4)  # NVML_ERROR_NO_PERMISSION
        if h == ("mig", 0, 1):
            return [types.SimpleNamespace(pid=4711, usedGpuMemory=3 << 30)]
        return []

    def mig_handle(h: Any, i: int) -> Any:
        if i > 1:
            raise StubError(6)  # NOT_FOUND: an empty slot
        return ("mig", h[1], i)

    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetComputeRunningProcesses = procs
    m.nvmlDeviceGetMigMode = lambda h: [1 if h in parent else 0, 0]
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    m.nvmlDeviceGetGpuInstanceId = lambda mh: mh[2] + 1
    m.nvmlDeviceGetName = lambda mh: "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    monkeypatch.setitem(sys.modules, "pynvml", m)
    nv = RealNvml()
    nv.init()
    r = Sampler(nv, cluster="c", node="n", clock=lambda: 0.0).sample()
    g0 = r.gpu_samples[0]
    assert [mi.gpu_instance_id for mi in g0.mig_instances] == [1, 2]
    assert [(p.pid, p.used_memory_mb) for p in g0.processes] == [(4711, 3072)]
    assert r.status.busy_gpus == 1 and r.status.gpu_health[0].error is None
