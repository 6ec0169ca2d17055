"""NVML readings -> :class:`~gpuhint.wire.contract.GpuSample` and
:class:`~gpuhint.wire.contract.NodeStatus`.

Every field read is guarded: an :class:`~agents.nvml.NvmlError` on one field gives
``None`` for that field only. A device that is *lost* (fell off the bus, needs a reset)
gets no GpuSample; it is reported ``ok=False`` in ``NodeStatus.gpu_health`` and the other
devices are sampled as usual. A fatal XID marks its GPU unhealthy until the agent
restarts (the GPU needs a reset anyway); other XIDs are reported in the sample only.

>>> from agents.fake_nvml import FakeNvml
>>> nv = FakeNvml("gpu-lost", clock=lambda: 0.0); nv.init(); nv.watch_xid()
>>> r = Sampler(nv, cluster="c", node="n1", clock=lambda: 0.0).sample()
>>> len(r.gpu_samples), r.status.num_gpus, r.status.healthy
(7, 8, False)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from agents.nvml import NOT_SUPPORTED, MigReading, Nvml, NvmlError, ProcessReading, XidEvent
from gpuhint.wire.contract import GpuHealth, GpuProcess, GpuSample, MigInstance, NodeStatus

log = logging.getLogger(__name__)

_MIB = float(1 << 20)
_T = TypeVar("_T")

FATAL_XIDS = frozenset({48, 74, 79, 92, 95, 119, 120})
"""XIDs after which the GPU needs a reset (NVIDIA XID catalogue: 48 double-bit ECC, 74
NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 95 uncontained ECC,
119/120 GSP errors). They mark the GPU unhealthy until the agent restarts."""


@dataclass(frozen=True)
class SampleResult:
    gpu_samples: list[GpuSample]
    status: NodeStatus


class _Reader:
    """Reads the fields of one device, turning errors into ``None`` and noting them."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.lost: NvmlError | None = None
        self.errors: dict[str, NvmlError] = {}

    def __call__(self, field: str, fn: Callable[[], _T]) -> _T | None:
        if self.lost is not None:
            return None
        try:
            return fn()
        except NvmlError as exc:
            if exc.lost:
                self.lost = exc
            else:
                self.errors[field] = exc
            return None


class Sampler:
    """Samples all GPUs of one node through an :class:`~agents.nvml.Nvml`.

    ``busy_util_pct``: a GPU counts as busy (``NodeStatus.busy_gpus``) when it runs a
    compute process or its utilization is at least this.
    """

    def __init__(
        self,
        nvml: Nvml,
        *,
        cluster: str,
        node: str,
        busy_util_pct: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nvml = nvml
        self.cluster = cluster
        self.node = node
        self.busy_util_pct = busy_util_pct
        self.clock = clock
        self._num_gpus = 0
        self._fatal_xid: dict[int, int] = {}
        self._logged: set[tuple[int, str, int]] = set()
        self._lost_logged: set[int] = set()

    def sample(self, *, running_jobs: Iterable[str] = (), samples_dropped: int = 0) -> SampleResult:
        now = self.clock()
        xids: dict[int, list[int]] = {}
        try:
            events = self.nvml.poll_xid()
        except NvmlError as exc:
            log.warning("cannot read XID events: %s", exc)
            events = []
        for ev in events:
            self._note_xid(ev, xids)
        try:
            self._num_gpus = self.nvml.device_count()
        except NvmlError as exc:
            # The driver itself is gone: every GPU we knew of is unhealthy.
            log.error("NVML device count failed: %s", exc)
            gone = tuple(
                GpuHealth(gpu_index=i, ok=False, error=f"NVML: {exc.message}")
                for i in range(self._num_gpus)
            )
            status = self._status(now, [], gone, running_jobs, samples_dropped)
            return SampleResult([], status)

        samples: list[GpuSample] = []
        health: list[GpuHealth] = []
        for i in range(self._num_gpus):
            s, h = self._sample_one(i, now, tuple(xids.get(i, ())))
            if s is not None:
                samples.append(s)
            health.append(h)
        return SampleResult(
            samples, self._status(now, samples, health, running_jobs, samples_dropped)
        )

    def _note_xid(self, ev: XidEvent, xids: dict[int, list[int]]) -> None:
        if ev.gpu_index is None:
            log.warning("XID %d on an unidentified GPU", ev.xid)
            return
        log.warning("XID %d on GPU %d", ev.xid, ev.gpu_index)
        xids.setdefault(ev.gpu_index, []).append(ev.xid)
        if ev.xid in FATAL_XIDS:
            self._fatal_xid.setdefault(ev.gpu_index, ev.xid)

    def _sample_one(
        self, i: int, now: float, xids: tuple[int, ...]
    ) -> tuple[GpuSample | None, GpuHealth]:
        nv = self.nvml
        r = _Reader(i)
        uuid = r("uuid", lambda: nv.uuid(i))
        util = r("utilization", lambda: nv.utilization(i))
        mem = r("memory", lambda: nv.memory(i))
        power = r("power_mw", lambda: nv.power_mw(i))
        energy = r("energy_mj", lambda: nv.energy_mj(i))
        temp = r("temperature_c", lambda: nv.temperature_c(i))
        sm = r("sm_clock_mhz", lambda: nv.sm_clock_mhz(i))
        thr = r("throttle_reasons", lambda: nv.throttle_reasons(i))
        ecc_c = r("ecc_corrected", lambda: nv.ecc_errors(i, False))
        ecc_u = r("ecc_uncorrected", lambda: nv.ecc_errors(i, True))
        procs = r("processes", lambda: nv.processes(i))
        migs = r("mig_instances", lambda: nv.mig_instances(i))

        if r.lost is not None:
            if i not in self._lost_logged:
                log.error("GPU %d is lost: %s", i, r.lost.message)
                self._lost_logged.add(i)
            err = r.lost.message + (f" (xid {', '.join(map(str, xids))})" if xids else "")
            return None, GpuHealth(gpu_index=i, ok=False, error=err)
        if i in self._lost_logged:
            log.warning("GPU %d answers again", i)
            self._lost_logged.discard(i)

        for field, exc in r.errors.items():
            key = (i, field, exc.code)
            if key not in self._logged:
                self._logged.add(key)
                lvl = logging.DEBUG if exc.code == NOT_SUPPORTED else logging.WARNING
                log.log(lvl, "GPU %d: cannot read %s: %s", i, field, exc.message)

        sample = GpuSample(
            cluster=self.cluster,
            node=self.node,
            gpu_index=i,
            uuid=uuid,
            time=now,
            gpu_util_pct=_clip_pct(util[0]) if util else None,
            mem_util_pct=_clip_pct(util[1]) if util else None,
            mem_used_mb=mem[0] / _MIB if mem else None,
            mem_total_mb=mem[1] / _MIB if mem else None,
            power_w=power / 1000.0 if power is not None else None,
            energy_mj=float(energy) if energy is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            sm_clock_mhz=float(sm) if sm is not None else None,
            throttle_reasons=thr,
            ecc_corrected=ecc_c,
            ecc_uncorrected=ecc_u,
            xid_errors=xids,
            processes=_processes(procs),
            mig_instances=_mig_instances(migs),
        )
        fatal = self._fatal_xid.get(i)
        problems = [f"{f}: {e.message}" for f, e in r.errors.items() if e.code != NOT_SUPPORTED]
        if fatal is not None:
            problems.insert(0, f"fatal xid {fatal}: GPU needs a reset")
        elif xids:
            problems.insert(0, f"xid {', '.join(map(str, xids))}")
        return sample, GpuHealth(gpu_index=i, ok=fatal is None, error="; ".join(problems) or None)

    def _busy(self, s: GpuSample) -> bool:
        if s.processes:
            return True
        return s.gpu_util_pct is not None and s.gpu_util_pct >= self.busy_util_pct

    def _status(
        self,
        now: float,
        samples: list[GpuSample],
        health: Iterable[GpuHealth],
        running_jobs: Iterable[str],
        samples_dropped: int,
    ) -> NodeStatus:
        health = tuple(health)
        return NodeStatus(
            cluster=self.cluster,
            node=self.node,
            time=now,
            num_gpus=self._num_gpus,
            busy_gpus=sum(1 for s in samples if self._busy(s)),
            healthy=all(h.ok for h in health),
            gpu_health=health,
            running_jobs=tuple(running_jobs),
            samples_dropped=samples_dropped,
        )


def _clip_pct(v: float) -> float:
    return min(100.0, max(0.0, float(v)))


def _processes(procs: Sequence[ProcessReading] | None) -> tuple[GpuProcess, ...]:
    """NVML's compute processes as the wire's (memory in MiB)."""
    return tuple(
        GpuProcess(
            pid=p.pid,
            used_memory_mb=None if p.used_memory_bytes is None else p.used_memory_bytes / _MIB,
        )
        for p in (procs or ())
    )


def _mig_instances(migs: Sequence[MigReading] | None) -> tuple[MigInstance, ...]:
    """NVML's MIG instances as the wire's (memory in MiB)."""
    return tuple(
        MigInstance(
            gpu_instance_id=m.gpu_instance_id,
            profile=m.profile,
            memory_total_mb=None if m.memory_total_bytes is None else m.memory_total_bytes / _MIB,
            memory_used_mb=None if m.memory_used_bytes is None else m.memory_used_bytes / _MIB,
        )
        for m in (migs or ())
    )
