"""The small NVML interface the agent uses, and its real implementation on ``pynvml``.

``pynvml`` is the module of the ``nvidia-ml-py`` package (NVIDIA's own bindings; the
PyPI package *named* ``pynvml`` is a deprecated wrapper). The interface is deliberately
thin, one method per NVML call, so the guarding logic (an error on one field gives
``None``; a lost GPU is reported, the others keep being sampled) lives in
:mod:`agents.sampler` and is exercised by the fake in :mod:`agents.fake_nvml` exactly as
it runs on real hardware.

Every method raises :class:`NvmlError` (never a ``pynvml`` exception) with the NVML
return code, so callers need not import ``pynvml``.

>>> NvmlError(GPU_IS_LOST).lost, NvmlError(NOT_SUPPORTED).lost
(True, False)
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

log = logging.getLogger(__name__)

# NVML return codes (nvml.h; the same numbers as pynvml's NVML_ERROR_*).
NO_PERMISSION = 4
NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
GPU_NOT_FOUND = 28
UNKNOWN = 999

LOST_CODES = frozenset({GPU_IS_LOST, RESET_REQUIRED, GPU_NOT_FOUND})
"""Return codes that mean the device itself is gone or unusable (fell off the bus...)."""

_MESSAGES = {
    NO_PERMISSION: "Insufficient Permissions",
    NOT_SUPPORTED: "Not Supported",
    NOT_FOUND: "Not Found",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    TIMEOUT: "Timeout",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    FUNCTION_NOT_FOUND: "Function Not Found",
    GPU_IS_LOST: "GPU is lost",
    RESET_REQUIRED: "GPU requires reset",
    LIB_RM_VERSION_MISMATCH: "NVML/driver version mismatch",
    GPU_NOT_FOUND: "GPU not found",
    UNKNOWN: "Unknown Error",
}

INSTALL_HINT = (
    "install the NVIDIA driver (it ships libnvidia-ml.so.1) and the Python bindings "
    "(pip install nvidia-ml-py); in a container, run with the NVIDIA runtime "
    "(--gpus all / runtimeClassName: nvidia). For development without a GPU use "
    "--nvml fake"
)


class NvmlError(Exception):
    """An NVML call failed; ``code`` is the NVML return code."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = code
        self.message = message or _MESSAGES.get(code, f"NVML error {code}")
        super().__init__(self.message)

    @property
    def lost(self) -> bool:
        """True when the device is gone (fell off the bus, needs a reset)."""
        return self.code in LOST_CODES


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this host at all; the message says what to install."""


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class MigReading:
    gpu_instance_id: int
    profile: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    processes: tuple[ProcessReading, ...] | None = None
    """The instance's compute processes (None: unreadable)."""


@dataclass(frozen=True)
class XidEvent:
    """One critical XID event; ``gpu_index`` is None when the device could not be mapped."""

    gpu_index: int | None
    xid: int


@runtime_checkable
class Nvml(Protocol):
    """What the agent needs from NVML. Every call may raise :class:`NvmlError`."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def uuid(self, index: int) -> str: ...
    def utilization(self, index: int) -> tuple[int, int]:
        """(gpu %, memory-controller %) over the driver's last sample period."""
        ...

    def memory(self, index: int) -> tuple[int, int]:
        """(used bytes, total bytes) of framebuffer memory."""
        ...

    def power_mw(self, index: int) -> int: ...
    def energy_mj(self, index: int) -> int:
        """Total energy since the driver was loaded, in millijoules."""
        ...

    def temperature_c(self, index: int) -> int: ...
    def sm_clock_mhz(self, index: int) -> int: ...
    def throttle_reasons(self, index: int) -> int:
        """Bitmask of ``nvmlClocksEventReason*`` (formerly ``nvmlClocksThrottleReason*``)."""
        ...

    def ecc_errors(self, index: int, uncorrected: bool) -> int:
        """Volatile (since driver load) ECC error count, corrected or uncorrected."""
        ...

    def processes(self, index: int) -> list[ProcessReading]: ...
    def mig_instances(self, index: int) -> list[MigReading]:
        """MIG GPU instances when MIG mode is enabled, else ``[]``, with their processes
        (in MIG mode NVML gives the whole GPU's only to a privileged caller)."""
        ...

    def watch_xid(self) -> None:
        """Register every device for critical-XID events (once, after :meth:`init`)."""
        ...

    def poll_xid(self) -> list[XidEvent]:
        """Drain pending XID events without blocking."""
        ...


_T = TypeVar("_T")

_MIG_PROFILE = re.compile(r"MIG\s+(\S+)")


class RealNvml:
    """:class:`Nvml` on the ``pynvml`` module (nvidia-ml-py)."""

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: dict[int, Any] = {}
        self._handle_index: dict[Any, int] = {}  # _handle_key(handle) -> index
        self._event_set: Any = None
        self._uuid_index: dict[str, int] = {}

    # --- lifecycle -------------------------------------------------------
    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"the pynvml module is missing ({exc}): {INSTALL_HINT}") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", UNKNOWN)
            what = _MESSAGES.get(code, str(exc))
            raise NvmlUnavailable(f"cannot initialise NVML ({what}): {INSTALL_HINT}") from None
        self._nv = pynvml

    def shutdown(self) -> None:
        if self._nv is None:
            return
        nv = self._nv
        if self._event_set is not None:
            with _suppress_nvml(nv):
                nv.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with _suppress_nvml(nv):
            nv.nvmlShutdown()
        self._nv = None
        self._handles.clear()
        self._handle_index.clear()

    # --- helpers ---------------------------------------------------------
    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        nv = self._nv
        if nv is None:
            raise NvmlError(1, "NVML not initialised")
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", UNKNOWN)
            raise NvmlError(code, _MESSAGES.get(code, str(exc))) from None
        except Exception as exc:
            if not isinstance(exc, getattr(nv, "NVMLLibraryMismatchError", ())):
                raise
            raise NvmlError(FUNCTION_NOT_FOUND) from None  # a function this driver lacks

    def _call_first(self, names: tuple[str, ...], *args: Any) -> Any:
        """Call the first of pynvml's functions ``names`` that this driver has (newer
        bindings name C functions that older drivers lack)."""
        missing = NvmlError(FUNCTION_NOT_FOUND)
        for name in names:
            fn = getattr(self._nv, name, None)
            if fn is None:
                continue
            try:
                return self._call(fn, *args)
            except NvmlError as exc:
                if exc.code != FUNCTION_NOT_FOUND:
                    raise
                missing = exc
        raise missing

    def _h(self, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = self._call(self._nv.nvmlDeviceGetHandleByIndex, index)
            self._handles[index] = h
            with suppress(TypeError):  # an unhashable handle: events map by UUID only
                self._handle_index[_handle_key(h)] = index
        return h

    # --- readings --------------------------------------------------------
    def driver_version(self) -> str:
        v = self._call(self._nv.nvmlSystemGetDriverVersion)
        return v.decode() if isinstance(v, bytes) else str(v)

    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def uuid(self, index: int) -> str:
        u = self._call(self._nv.nvmlDeviceGetUUID, self._h(index))
        s = u.decode() if isinstance(u, bytes) else str(u)
        self._uuid_index[s] = index
        return s

    def utilization(self, index: int) -> tuple[int, int]:
        u = self._call(self._nv.nvmlDeviceGetUtilizationRates, self._h(index))
        return int(u.gpu), int(u.memory)

    def memory(self, index: int) -> tuple[int, int]:
        m = self._call(self._nv.nvmlDeviceGetMemoryInfo, self._h(index))
        return int(m.used), int(m.total)

    def power_mw(self, index: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPowerUsage, self._h(index)))

    def energy_mj(self, index: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetTotalEnergyConsumption, self._h(index)))

    def temperature_c(self, index: int) -> int:
        nv = self._nv
        return int(self._call(nv.nvmlDeviceGetTemperature, self._h(index), nv.NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, index: int) -> int:
        nv = self._nv
        return int(self._call(nv.nvmlDeviceGetClockInfo, self._h(index), nv.NVML_CLOCK_SM))

    def throttle_reasons(self, index: int) -> int:
        names = (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        return int(self._call_first(names, self._h(index)))

    def ecc_errors(self, index: int, uncorrected: bool) -> int:
        nv = self._nv
        kind = (
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            if uncorrected
            else nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
        )
        return int(
            self._call(nv.nvmlDeviceGetTotalEccErrors, self._h(index), kind, nv.NVML_VOLATILE_ECC)
        )

    def processes(self, index: int) -> list[ProcessReading]:
        return self._processes(self._h(index))

    def _processes(self, handle: Any) -> list[ProcessReading]:
        """The compute processes of a device or MIG device handle."""
        names = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
        procs = self._call_first(names, handle)  # _v3 needs R510+, _v2 is older
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessReading(int(p.pid), int(used) if used is not None else None))
        return out

    def mig_instances(self, index: int) -> list[MigReading]:
        nv = self._nv
        h = self._h(index)
        try:
            current, _pending = self._call(nv.nvmlDeviceGetMigMode, h)
        except NvmlError as exc:
            if exc.code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                return []  # pre-Ampere GPUs have no MIG
            raise
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for i in range(int(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, h))):
            try:
                mh = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            except NvmlError as exc:
                if exc.code in (NOT_FOUND, 2):  # slot without an instance
                    continue
                raise
            gi = int(self._call(nv.nvmlDeviceGetGpuInstanceId, mh))
            profile = None
            try:
                name = self._call(nv.nvmlDeviceGetName, mh)
                name = name.decode() if isinstance(name, bytes) else str(name)
                m = _MIG_PROFILE.search(name)
                profile = m.group(1) if m else name
            except NvmlError:
                pass
            total = used = None
            try:
                mem = self._call(nv.nvmlDeviceGetMemoryInfo, mh)
                total, used = int(mem.total), int(mem.used)
            except NvmlError:
                pass
            procs: tuple[ProcessReading, ...] | None = None
            with suppress(NvmlError):  # unlike the whole GPU's, needs no privileges
                procs = tuple(self._processes(mh))
            out.append(MigReading(gi, profile, total, used, procs))
        return out

    # --- XID events ------------------------------------------------------
    def watch_xid(self) -> None:
        nv = self._nv
        self._event_set = self._call(nv.nvmlEventSetCreate)
        for i in range(self.device_count()):
            try:
                self.uuid(i)
                self._call(
                    nv.nvmlDeviceRegisterEvents,
                    self._h(i),
                    nv.nvmlEventTypeXidCriticalError,
                    self._event_set,
                )
            except NvmlError:
                continue  # unsupported on this device, or it is already lost

    def poll_xid(self) -> list[XidEvent]:
        """Drain pending XID events; an NVML error other than the timeout that ends the
        drain is logged and stops it, keeping the events already drained."""
        nv = self._nv
        if self._event_set is None:
            return []
        out: list[XidEvent] = []
        for _ in range(1000):  # bounded drain
            try:
                data = self._call(nv.nvmlEventSetWait, self._event_set, 0)
            except NvmlError as exc:
                if exc.code != TIMEOUT:
                    log.warning("reading XID events: %s (kept %d drained)", exc, len(out))
                break
            out.append(XidEvent(self._event_index(data.device), int(data.eventData)))
        return out

    def _event_index(self, handle: Any) -> int | None:
        """The index of an event's device: from the handles we hold (works for a GPU that
        fell off the bus), else through its UUID; None when neither maps it."""
        try:
            index = self._handle_index.get(_handle_key(handle))
        except TypeError:
            index = None
        if index is not None:
            return index
        try:
            u = self._call(self._nv.nvmlDeviceGetUUID, handle)
        except NvmlError:
            return None
        return self._uuid_index.get(u.decode() if isinstance(u, bytes) else str(u))


def _handle_key(handle: Any) -> Any:
    """A hashable identity of a device handle: the address a pynvml handle (a ctypes
    pointer, a new object each time it is read from an event) points at, else itself."""
    if isinstance(handle, ctypes._Pointer):
        return ("ptr", ctypes.cast(handle, ctypes.c_void_p).value)
    return handle


def _suppress_nvml(nv: Any) -> AbstractContextManager[None]:
    return suppress(nv.NVMLError)
