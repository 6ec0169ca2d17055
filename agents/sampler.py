"""NVML readings -> :class:`~gpuhint.wire.contract.GpuSample` and
:class:`~gpuhint.wire.contract.NodeStatus`.

Every field read is guarded: an :class:`~agents.nvml.NvmlError` on one field gives
``None`` for that field only. A device that is *lost* (fell off the bus, needs a reset)
gets no GpuSample; it is reported ``ok=False`` in ``NodeStatus.gpu_health`` and the other
devices are sampled as usual. A fatal XID marks its GPU unhealthy until the agent
restarts (the GPU needs a reset anyway); other XIDs are reported in the sample only.

Nothing one GPU reports can stop the node's report: a value the wire contract rejects
costs that GPU's sample only (logged, counted in :attr:`Sampler.rejected_samples` and
named in its ``gpu_health`` error); an XID storm is deduplicated and capped, long error
texts are cut to the contract's length, and ``samples_dropped`` saturates at the
contract's maximum.

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
from typing import Any, TypeVar

from pydantic import ValidationError

from agents.nvml import NOT_SUPPORTED, MigReading, Nvml, NvmlError, ProcessReading
from gpuhint.wire.contract import (
    MAX_COUNT,
    MAX_LIST,
    GpuHealth,
    GpuProcess,
    GpuSample,
    MigInstance,
    NodeStatus,
)

log = logging.getLogger(__name__)

_MIB = float(1 << 20)
_T = TypeVar("_T")

FATAL_XIDS = frozenset({48, 74, 79, 92, 95, 119, 120})
"""XIDs after which the GPU needs a reset (NVIDIA XID catalogue: 48 double-bit ECC, 74
NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 95 uncontained ECC,
119/120 GSP errors). They mark the GPU unhealthy until the agent restarts."""

MAX_XIDS = 256
"""Distinct XIDs one GpuSample carries (the contract's ``xid_errors`` length)."""
MAX_ERROR_CHARS = 2048
"""Length of a ``GpuHealth.error`` text (the contract's ``Reason``)."""
MAX_JOB_ID_CHARS = 256
"""Length of a ``NodeStatus.running_jobs`` entry (the contract's ``Text``)."""


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
        self._rejected_logged: set[tuple[int, str]] = set()
        self._jobs_warned = False
        self.rejected_samples = 0
        """GPU samples not sent because the wire contract rejected a value."""

    def sample(self, *, running_jobs: Iterable[str] = (), samples_dropped: int = 0) -> SampleResult:
        now = self.clock()
        xids = self._poll_xids()
        try:
            self._num_gpus = self.nvml.device_count()
        except NvmlError as exc:
            # The driver itself is gone: every GPU we knew of is unhealthy.
            log.error("NVML device count failed: %s", exc)
            gone = tuple(_health(i, False, f"NVML: {exc.message}") for i in range(self._num_gpus))
            status = self._status(now, [], gone, running_jobs, samples_dropped, driver_ok=False)
            return SampleResult([], status)

        samples: list[GpuSample] = []
        health: list[GpuHealth] = []
        for i in range(self._num_gpus):
            s, h = self._sample_one(i, now, xids.get(i, ()))
            if s is not None:
                samples.append(s)
            health.append(h)
        return SampleResult(
            samples, self._status(now, samples, health, running_jobs, samples_dropped)
        )

    def _poll_xids(self) -> dict[int, tuple[int, ...]]:
        """Drain the XID events: each GPU's distinct XIDs in order of first occurrence,
        at most :data:`MAX_XIDS` (a storm is one log line per GPU, with the counts)."""
        try:
            events = self.nvml.poll_xid()
        except NvmlError as exc:
            log.warning("cannot read XID events: %s", exc)
            events = []
        counts: dict[int | None, dict[int, int]] = {}
        for ev in events:
            seen = counts.setdefault(ev.gpu_index, {})
            seen[ev.xid] = seen.get(ev.xid, 0) + 1
            if ev.gpu_index is not None and ev.xid in FATAL_XIDS:
                self._fatal_xid.setdefault(ev.gpu_index, ev.xid)
        out: dict[int, tuple[int, ...]] = {}
        for gpu, seen in counts.items():
            listed = [f"{x} ({n} times)" if n > 1 else str(x) for x, n in seen.items()]
            more = f" and {len(listed) - 20} more" if len(listed) > 20 else ""
            where = "an unidentified GPU" if gpu is None else f"GPU {gpu}"
            log.warning("XID %s%s on %s", ", ".join(listed[:20]), more, where)
            if gpu is not None:
                out[gpu] = tuple(seen)[:MAX_XIDS]
                if len(seen) > MAX_XIDS:
                    log.warning("GPU %d: reporting the first %d distinct XIDs", gpu, MAX_XIDS)
        return out

    def _sample_one(
        self, i: int, now: float, xids: tuple[int, ...]
    ) -> tuple[GpuSample | None, GpuHealth]:
        r = _Reader(i)
        values = self._read(i, r)
        if r.lost is not None:
            if i not in self._lost_logged:
                log.error("GPU %d is lost: %s", i, r.lost.message)
                self._lost_logged.add(i)
            err = r.lost.message + (f" (xid {', '.join(map(str, xids))})" if xids else "")
            return None, _health(i, False, err)
        if i in self._lost_logged:
            log.warning("GPU %d answers again", i)
            self._lost_logged.discard(i)
        if values["processes"] is None:  # MIG without privileges: from its instances
            mig_procs = _mig_processes(values["mig_instances"])
            if mig_procs is not None:
                values["processes"] = mig_procs
                r.errors.pop("processes", None)

        for field, exc in r.errors.items():
            key = (i, field, exc.code)
            if key not in self._logged:
                self._logged.add(key)
                lvl = logging.DEBUG if exc.code == NOT_SUPPORTED else logging.WARNING
                log.log(lvl, "GPU %d: cannot read %s: %s", i, field, exc.message)

        fatal = self._fatal_xid.get(i)
        problems = [f"{f}: {e.message}" for f, e in r.errors.items() if e.code != NOT_SUPPORTED]
        if fatal is not None:
            problems.insert(0, f"fatal xid {fatal}: GPU needs a reset")
        elif xids:
            problems.insert(0, f"xid {', '.join(map(str, xids))}")
        sample: GpuSample | None
        try:
            sample = self._gpu_sample(i, now, xids, values)
        except (ValueError, TypeError, OverflowError) as exc:  # ValidationError included
            sample = None
            problems.append(self._rejected(i, exc))
        return sample, _health(i, fatal is None, "; ".join(problems) or None)

    def _read(self, i: int, r: _Reader) -> dict[str, Any]:
        """Every NVML field of GPU ``i`` (``None`` where ``r`` noted an error)."""
        nv = self.nvml
        return {
            "uuid": r("uuid", lambda: nv.uuid(i)),
            "utilization": r("utilization", lambda: nv.utilization(i)),
            "memory": r("memory", lambda: nv.memory(i)),
            "power_mw": r("power_mw", lambda: nv.power_mw(i)),
            "energy_mj": r("energy_mj", lambda: nv.energy_mj(i)),
            "temperature_c": r("temperature_c", lambda: nv.temperature_c(i)),
            "sm_clock_mhz": r("sm_clock_mhz", lambda: nv.sm_clock_mhz(i)),
            "throttle_reasons": r("throttle_reasons", lambda: nv.throttle_reasons(i)),
            "ecc_corrected": r("ecc_corrected", lambda: nv.ecc_errors(i, False)),
            "ecc_uncorrected": r("ecc_uncorrected", lambda: nv.ecc_errors(i, True)),
            "processes": r("processes", lambda: nv.processes(i)),
            "mig_instances": r("mig_instances", lambda: nv.mig_instances(i)),
        }

    def _rejected(self, i: int, exc: Exception) -> str:
        """Count and log a GPU sample that could not be built; the reason, for its health."""
        self.rejected_samples += 1
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "sample"
            why = f"sample rejected: {where}: {first['msg']}"
        else:  # a reading of an unexpected shape
            where = type(exc).__name__
            why = f"sample rejected: {where}: {exc}"
        if (i, where) not in self._rejected_logged:  # once per GPU and field
            self._rejected_logged.add((i, where))
            log.error("GPU %d: %s; this GPU's sample is not sent", i, why)
        return why

    def _gpu_sample(
        self, i: int, now: float, xids: tuple[int, ...], v: dict[str, Any]
    ) -> GpuSample:
        """The wire sample of GPU ``i`` from its readings ``v`` (raises ValidationError)."""
        util, mem, power = v["utilization"], v["memory"], v["power_mw"]
        energy, temp, sm = v["energy_mj"], v["temperature_c"], v["sm_clock_mhz"]
        return GpuSample(
            cluster=self.cluster,
            node=self.node,
            gpu_index=i,
            uuid=v["uuid"],
            time=now,
            gpu_util_pct=_clip_pct(util[0]) if util else None,
            mem_util_pct=_clip_pct(util[1]) if util else None,
            mem_used_mb=mem[0] / _MIB if mem else None,
            mem_total_mb=mem[1] / _MIB if mem else None,
            power_w=power / 1000.0 if power is not None else None,
            energy_mj=float(energy) if energy is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            sm_clock_mhz=float(sm) if sm is not None else None,
            throttle_reasons=v["throttle_reasons"],
            ecc_corrected=v["ecc_corrected"],
            ecc_uncorrected=v["ecc_uncorrected"],
            xid_errors=xids,
            processes=_processes(v["processes"]),
            mig_instances=_mig_instances(v["mig_instances"]),
        )

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
        *,
        driver_ok: bool = True,
    ) -> NodeStatus:
        """``driver_ok=False``: NVML failed as a whole (unhealthy even with no GPU known)."""
        health = tuple(health)
        return NodeStatus(
            cluster=self.cluster,
            node=self.node,
            time=now,
            num_gpus=self._num_gpus,
            busy_gpus=sum(1 for s in samples if self._busy(s)),
            healthy=driver_ok and all(h.ok for h in health),
            gpu_health=health,
            running_jobs=self._jobs(running_jobs),
            samples_dropped=min(samples_dropped, MAX_COUNT),  # saturates, like a gauge
        )

    def _jobs(self, running_jobs: Iterable[str]) -> tuple[str, ...]:
        """The running job ids the contract can carry (too long ids and the excess of
        :data:`MAX_LIST` are left out, with a warning)."""
        jobs = tuple(running_jobs)
        fit = tuple(j for j in jobs if len(j) <= MAX_JOB_ID_CHARS)[:MAX_LIST]
        if len(fit) < len(jobs) and not self._jobs_warned:
            self._jobs_warned = True
            log.warning(
                "%d of %d running job id(s) left out of NodeStatus.running_jobs "
                "(longer than %d characters, or more than %d jobs)",
                len(jobs) - len(fit),
                len(jobs),
                MAX_JOB_ID_CHARS,
                MAX_LIST,
            )
        return fit


def _health(i: int, ok: bool, error: str | None) -> GpuHealth:
    """A GPU's health, its error text cut to the contract's :data:`MAX_ERROR_CHARS`."""
    if error is not None and len(error) > MAX_ERROR_CHARS:
        error = error[: MAX_ERROR_CHARS - 1] + "…"
    return GpuHealth(gpu_index=i, ok=ok, error=error)


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


def _mig_processes(migs: Sequence[MigReading] | None) -> list[ProcessReading] | None:
    """The processes of a GPU's MIG instances (None when none could be read)."""
    read = [m.processes for m in migs or () if m.processes is not None]
    return [p for procs in read for p in procs] if read else None


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
