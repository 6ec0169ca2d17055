"""The wire contract: every message that crosses Kafka or lands in Redis.

Agents, stream processors and scheduler clients all import these schemas and nothing
else to talk to each other. Each message is JSON with a ``schema_version`` and a
``kind``; a consumer rejects a version it does not know instead of guessing.

>>> ev = JobEvent(phase="submitted", job_id="42", vc="vc1", user="alice",
...               num_gpus=8, time=0.0, submit_time=0.0)
>>> decode_message(encode_message(ev)) == ev
True
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION: Literal[1] = 1
"""The version every message here is written with; bump it on any breaking change."""

NonNegInt = Annotated[int, Field(ge=0)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^:\s]+$")]
"""A cluster, VC or node name: it goes into Redis keys, so no ':' and no whitespace."""
NonNegFloat = Annotated[float, Field(ge=0.0)]


class InvalidMessage(ValueError):
    """A message that cannot be decoded; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)
    schema_version: Literal[1] = SCHEMA_VERSION


class _Part(BaseModel):
    """A nested part of a message (no version of its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class JobPhase(StrEnum):
    SUBMITTED = "submitted"
    STARTED = "started"
    FINISHED = "finished"


class JobState(StrEnum):
    """Final state of a finished job (Slurm/Helios names; Philly's map onto them)."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    UNKNOWN = "UNKNOWN"


class JobEvent(_Wire):
    """One lifecycle step of one job, as a scheduler or a trace replay reports it.

    Times are UNIX seconds (UTC). ``duration_s`` is the run time and is set on
    ``finished`` events; ``state`` is the final state, also only on ``finished``.
    ``time_limit_s`` is the run time the job asked for (Slurm ``TimeLimit``, Kubernetes
    ``activeDeadlineSeconds``), when the scheduler has one; ``partition`` is the
    scheduler's partition or queue, when it has one.
    """

    kind: Literal["job"] = "job"
    phase: JobPhase
    job_id: Annotated[str, Field(min_length=1, max_length=256)]
    cluster: Name = "default"
    vc: Name = "default"
    user: str | None = None
    name: str | None = None
    num_gpus: NonNegInt = 0
    num_cpus: NonNegInt | None = None
    num_nodes: NonNegInt | None = None
    time: float
    submit_time: float
    start_time: float | None = None
    duration_s: NonNegFloat | None = None
    state: JobState | None = None
    nodes: tuple[str, ...] = ()
    time_limit_s: NonNegFloat | None = None
    partition: str | None = None


class GpuProcess(_Part):
    pid: NonNegInt
    used_memory_mb: NonNegFloat | None = None


class MigInstance(_Part):
    gpu_instance_id: NonNegInt
    profile: str | None = None
    memory_total_mb: NonNegFloat | None = None
    memory_used_mb: NonNegFloat | None = None


class GpuSample(_Wire):
    """One NVML reading of one GPU. ``None`` means NVML could not read that field."""

    kind: Literal["gpu_sample"] = "gpu_sample"
    cluster: Name = "default"
    node: Name
    gpu_index: NonNegInt
    uuid: str | None = None
    time: float
    gpu_util_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    mem_util_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    mem_used_mb: NonNegFloat | None = None
    mem_total_mb: NonNegFloat | None = None
    power_w: NonNegFloat | None = None
    energy_mj: NonNegFloat | None = None
    temperature_c: float | None = None
    sm_clock_mhz: NonNegFloat | None = None
    throttle_reasons: NonNegInt | None = None
    ecc_corrected: NonNegInt | None = None
    ecc_uncorrected: NonNegInt | None = None
    xid_errors: tuple[int, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    mig_instances: tuple[MigInstance, ...] = ()


class GpuHealth(_Part):
    gpu_index: NonNegInt
    ok: bool
    error: str | None = None


class NodeStatus(_Wire):
    """A node's summary at one time: how many GPUs it has, uses, and whether it is healthy."""

    kind: Literal["node_status"] = "node_status"
    cluster: Name = "default"
    node: Name
    time: float
    num_gpus: NonNegInt
    busy_gpus: NonNegInt = 0
    powered_on: bool = True
    healthy: bool = True
    gpu_health: tuple[GpuHealth, ...] = ()
    running_jobs: tuple[str, ...] = ()
    samples_dropped: NonNegInt = 0


class FeatureContribution(_Part):
    feature: str
    contribution: float


class PriorityHint(_Wire):
    """QSSF hint for one pending job: run smaller ``priority`` first.

    ``priority`` is the expected service in GPU-seconds (GPUs x the expected duration,
    which ranks jobs best for mean completion time); ``predicted_duration_s`` is the point
    forecast and ``duration_p10_s``/``duration_p90_s`` bound it (an 80% band).
    """

    kind: Literal["priority_hint"] = "priority_hint"
    job_id: str
    cluster: Name = "default"
    vc: Name = "default"
    user: str | None = None
    num_gpus: NonNegInt
    submit_time: float
    predicted_duration_s: NonNegFloat
    priority: NonNegFloat
    duration_p10_s: NonNegFloat | None = None
    duration_p90_s: NonNegFloat | None = None
    log_duration_std: NonNegFloat | None = None
    model: str
    model_version: str
    reasons: tuple[FeatureContribution, ...] = ()
    created_at: float


class PowerAction(StrEnum):
    POWER_DOWN = "power_down"
    KEEP = "keep"
    WAKE = "wake"


class PowerAdvisory(_Wire):
    """CES advice for a cluster (``node`` is None) or one node (``node`` set)."""

    kind: Literal["power_advisory"] = "power_advisory"
    cluster: Name = "default"
    node: Name | None = None
    time: float
    action: PowerAction
    count: NonNegInt = 0
    nodes: tuple[str, ...] = ()
    reason: str
    used_nodes: NonNegFloat | None = None
    active_nodes: NonNegInt | None = None
    total_nodes: NonNegInt | None = None
    forecast_nodes: NonNegFloat | None = None
    forecast_upper_nodes: NonNegFloat | None = None
    horizon_s: NonNegFloat | None = None
    est_energy_saved_kwh: NonNegFloat | None = None


class ClusterLoad(_Wire):
    """Derived load of one cluster: nodes in use, idle and powered on, at one time."""

    kind: Literal["cluster_load"] = "cluster_load"
    cluster: Name = "default"
    time: float
    total_nodes: NonNegInt
    active_nodes: NonNegInt
    used_nodes: NonNegInt
    busy_gpus: NonNegInt = 0
    total_gpus: NonNegInt = 0
    idle_nodes: tuple[str, ...] = ()
    unhealthy_nodes: tuple[str, ...] = ()


Message = Annotated[
    JobEvent | GpuSample | NodeStatus | PriorityHint | PowerAdvisory | ClusterLoad,
    Field(discriminator="kind"),
]
_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)
KINDS = ("job", "gpu_sample", "node_status", "priority_hint", "power_advisory", "cluster_load")


def encode_message(msg: BaseModel) -> bytes:
    """Serialize a contract message to compact UTF-8 JSON."""
    return msg.model_dump_json(exclude_none=True).encode()


def decode_message(raw: bytes | str | dict[str, Any]) -> Message:
    """Parse and validate one message; raise :class:`InvalidMessage` with a one-line reason."""
    if isinstance(raw, dict):
        obj = raw
    else:
        try:
            obj = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidMessage(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidMessage(f"expected a JSON object, got {type(obj).__name__}")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InvalidMessage(
            f"unsupported schema_version {version!r} (this build reads {SCHEMA_VERSION})"
        )
    if obj.get("kind") not in KINDS:
        raise InvalidMessage(f"unknown kind {obj.get('kind')!r} (expected one of {KINDS})")
    try:
        return _MESSAGE.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise InvalidMessage(f"{loc}: {first['msg']} ({exc.error_count()} error(s))") from None


def decode_job_event(raw: bytes | str | dict[str, Any]) -> JobEvent:
    """Like :func:`decode_message` but insists on a :class:`JobEvent`."""
    msg = decode_message(raw)
    if not isinstance(msg, JobEvent):
        raise InvalidMessage(f"expected kind 'job', got {msg.kind!r}")
    return msg
