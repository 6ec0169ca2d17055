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
import time as _time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpuhint.wire.strict_json import (
    InvalidMessage,
    check_depth,
    count_keys,
    json_type,
    parse_strict,
    short,
)

SCHEMA_VERSION: Literal[1] = 1
"""The version every message here is written with; bump it on any breaking change."""

# Hard caps, checked on every message built anywhere (decode adds the tighter,
# configurable :class:`Limits`). Times are UNIX seconds between 1970 and 2100.
MAX_TIME = 4_102_444_800.0
"""2100-01-01 UTC: no time, submit or start may be later."""
MAX_DURATION_S = 366 * 86400.0
"""A run time, time limit or horizon is at most a (leap) year."""
MAX_GPUS = 65_536
MAX_COUNT = 1_000_000
MAX_LIST = 4096
"""Longest tuple (node lists, running jobs, processes) any message may carry."""

NonNegInt = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^:\s]+$")]
"""A cluster, VC or node name: it goes into Redis keys, so no ':' and no whitespace."""
JobId = Annotated[str, Field(min_length=1, max_length=256)]
TEXT_MAX = 256
"""The longest free-form label (a job name, a user) the contract takes."""
Text = Annotated[str, Field(max_length=TEXT_MAX)]
"""A free-form label (user, job name, partition, model): bounded."""
Reason = Annotated[str, Field(max_length=2048)]
NonNegFloat = Annotated[float, Field(ge=0.0, le=1e15)]
Time = Annotated[float, Field(ge=0.0, le=MAX_TIME)]
Duration = Annotated[float, Field(ge=0.0, le=MAX_DURATION_S)]
Gpus = Annotated[int, Field(ge=0, le=MAX_GPUS)]


@dataclass(frozen=True)
class Limits:
    """What :func:`decode_message` accepts from the wire beyond the hard caps.

    Settings (``GPUHINT_MAX_GPUS_PER_JOB`` ...) build one with
    :meth:`gpuhint.wire.config.Settings.limits`; decode passes it to validation.

    * ``max_bytes`` / ``max_depth``: size and JSON nesting, checked before parsing;
    * ``max_gpus`` / ``max_nodes``: GPUs and nodes of one job (the cluster's maximum);
    * ``max_future_s``: how far past ``clock()`` a message's time may lie;
    * ``clock_skew_s``: tolerance of the phase-order checks (submit <= start <= time).
    """

    max_bytes: int = 256 * 1024
    max_depth: int = 16
    max_gpus: int = 2048
    max_nodes: int = 512
    max_future_s: float = 86400.0
    clock_skew_s: float = 60.0
    clock: Any = field(default=_time.time, compare=False, repr=False)


DEFAULT_LIMITS = Limits()


def _limits(info: ValidationInfo) -> Limits | None:
    ctx = info.context
    return ctx.get("limits") if isinstance(ctx, dict) else None


class _Wire(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", use_enum_values=False, allow_inf_nan=False
    )
    schema_version: Literal[1] = SCHEMA_VERSION

    @field_validator("schema_version", mode="before")
    @classmethod
    def _version_is_an_int(cls, v: Any) -> Any:
        # Literal[1] alone takes true == 1 and 1.0 == 1
        if type(v) is not int:
            raise ValueError(
                f"schema_version must be the integer {SCHEMA_VERSION}, "
                f"not {short(v)} ({json_type(v)})"
            )
        return v


class _Part(BaseModel):
    """A nested part of a message (no version of its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


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

    Decoded from the wire, an event must also be consistent (:class:`Limits`): at most
    ``max_gpus`` GPUs and ``max_nodes`` nodes, ``time`` no later than now +
    ``max_future_s``, ``submit_time <= start_time <= time`` (within ``clock_skew_s``), and
    ``duration_s``/``state`` only on ``finished``; ``duration_s`` is at most a year. How
    the engine treats duplicates and out-of-order phases is in docs/operations.md.
    """

    kind: Literal["job"] = "job"
    phase: JobPhase
    job_id: JobId
    cluster: Name = "default"
    vc: Name = "default"
    user: Text | None = None
    name: Text | None = None
    num_gpus: Gpus = 0
    num_cpus: NonNegInt | None = None
    num_nodes: Annotated[int, Field(ge=0, le=MAX_LIST)] | None = None
    time: Time
    submit_time: Time
    start_time: Time | None = None
    duration_s: Duration | None = None
    state: JobState | None = None
    nodes: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST)] = ()
    time_limit_s: Duration | None = None
    partition: Text | None = None

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Self:
        lim = _limits(info)
        if lim is None:  # built in-process (traces, agents): hard caps only
            return self
        skew = lim.clock_skew_s
        if self.num_gpus > lim.max_gpus:
            raise ValueError(f"num_gpus {self.num_gpus} exceeds the cluster maximum {lim.max_gpus}")
        if len(self.nodes) > lim.max_nodes or (self.num_nodes or 0) > lim.max_nodes:
            raise ValueError(f"more than {lim.max_nodes} nodes (GPUHINT_MAX_NODES_PER_JOB)")
        latest = lim.clock() + lim.max_future_s
        if self.time > latest:
            raise ValueError(f"time {self.time:.0f} is more than {lim.max_future_s:.0f} s ahead")
        if self.submit_time > self.time + skew:
            raise ValueError("submit_time is after time (an event before its job was submitted)")
        if self.start_time is not None and not (
            self.submit_time - skew <= self.start_time <= self.time + skew
        ):
            raise ValueError("start_time is not between submit_time and time")
        if self.phase is not JobPhase.FINISHED and (
            self.duration_s is not None or self.state is not None
        ):
            raise ValueError(f"duration_s/state on a {self.phase.value!r} event")
        return self


class JobRoster(_Wire):
    """The jobs a scheduler agent sees not finished in one VC at ``epoch`` (a poll's time),
    keyed ``cluster/vc`` like job events; a long list in parts (``part`` 0, 1, ..., the
    ``last`` completes it). The worker retires a job two complete rosters in a row of one
    ``agent`` (who sent it: node name and feeds) leave out (:mod:`gpuhint.cores.qssf_roster`;
    docs/operations.md, "Rosters")."""

    kind: Literal["job_roster"] = "job_roster"
    cluster: Name = "default"
    vc: Name = "default"
    epoch: Time
    part: Annotated[int, Field(ge=0, le=MAX_COUNT)] = 0
    last: bool = True
    job_ids: Annotated[tuple[JobId, ...], Field(max_length=MAX_LIST)] = ()
    agent: Name | None = None

    @model_validator(mode="after")
    def _not_ahead(self, info: ValidationInfo) -> Self:
        lim = _limits(info)
        if lim is not None and self.epoch > lim.clock() + lim.max_future_s:
            raise ValueError(f"epoch {self.epoch:.0f} is more than {lim.max_future_s:.0f} s ahead")
        return self


# NVML-sized integers, widened in place from NonNegInt (le=1e6), which real hosts exceed:
# every message valid before is still valid, so no schema_version bump (that is for
# breaking changes only).
Pid = Annotated[int, Field(ge=0, le=2**22)]
"""A Linux PID: ``pid_max`` is at most 2**22 (4194304, systemd's default on 64-bit hosts)."""
NvmlU64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
"""An NVML ``unsigned long long``: clock-event reason bitmasks (bit 63,
0x8000000000000000, is "unknown"), volatile ECC counters, XID event data."""


class GpuProcess(_Part):
    pid: Pid
    used_memory_mb: NonNegFloat | None = None


class MigInstance(_Part):
    gpu_instance_id: NonNegInt
    profile: Text | None = None
    memory_total_mb: NonNegFloat | None = None
    memory_used_mb: NonNegFloat | None = None


class GpuSample(_Wire):
    """One NVML reading of one GPU. ``None`` means NVML could not read that field."""

    kind: Literal["gpu_sample"] = "gpu_sample"
    cluster: Name = "default"
    node: Name
    gpu_index: NonNegInt
    uuid: Text | None = None
    time: Time
    gpu_util_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    mem_util_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    mem_used_mb: NonNegFloat | None = None
    mem_total_mb: NonNegFloat | None = None
    power_w: NonNegFloat | None = None
    energy_mj: NonNegFloat | None = None
    temperature_c: Annotated[float, Field(ge=-100, le=300)] | None = None
    sm_clock_mhz: NonNegFloat | None = None
    throttle_reasons: NvmlU64 | None = None
    ecc_corrected: NvmlU64 | None = None
    ecc_uncorrected: NvmlU64 | None = None
    xid_errors: Annotated[tuple[NvmlU64, ...], Field(max_length=256)] = ()
    processes: Annotated[tuple[GpuProcess, ...], Field(max_length=MAX_LIST)] = ()
    mig_instances: Annotated[tuple[MigInstance, ...], Field(max_length=64)] = ()


class GpuHealth(_Part):
    gpu_index: NonNegInt
    ok: bool
    error: Reason | None = None


class NodeStatus(_Wire):
    """A node's summary at one time: how many GPUs it has, uses, and whether it is healthy."""

    kind: Literal["node_status"] = "node_status"
    cluster: Name = "default"
    node: Name
    time: Time
    num_gpus: NonNegInt
    busy_gpus: NonNegInt = 0
    powered_on: bool = True
    healthy: bool = True
    gpu_health: Annotated[tuple[GpuHealth, ...], Field(max_length=256)] = ()
    running_jobs: Annotated[tuple[Text, ...], Field(max_length=MAX_LIST)] = ()
    samples_dropped: NonNegInt = 0


class FeatureContribution(_Part):
    feature: Text
    contribution: float


ARRIVAL_ORDER_REASON = "fifo_guard:fallback"
"""The first reason of a hint whose VC follows arrival order (its FIFO guard fell back):
its ``priority`` is the submit time, not a service, so an applier that maps priorities
onto levels gives such a job its neutral level (:attr:`PriorityHint.in_arrival_order`)."""


class PriorityHint(_Wire):
    """QSSF hint for one pending job: run smaller ``priority`` first.

    ``priority`` is the expected service in GPU-seconds (GPUs x the expected duration,
    which ranks jobs best for mean completion time); ``predicted_duration_s`` is the point
    forecast and ``duration_p10_s``/``duration_p90_s`` bound it (an 80% band).
    ``expected_duration_s`` (optional, added later) is the expected duration the hint
    describes: ``priority == num_gpus x expected_duration_s`` (GPUs at least 1) unless
    the first reason says the rank was overridden (``wait_bound:overdue``: priority 0,
    ``fifo_guard:fallback``: priority = submit time). All of these describe one estimate,
    also after a hint update (docs/qssf.md "Hints that agree with themselves").
    """

    kind: Literal["priority_hint"] = "priority_hint"
    job_id: JobId
    cluster: Name = "default"
    vc: Name = "default"
    user: Text | None = None
    num_gpus: Gpus
    submit_time: Time
    predicted_duration_s: NonNegFloat
    priority: NonNegFloat
    duration_p10_s: NonNegFloat | None = None
    duration_p90_s: NonNegFloat | None = None
    log_duration_std: NonNegFloat | None = None
    model: Text
    model_version: Text
    reasons: Annotated[tuple[FeatureContribution, ...], Field(max_length=64)] = ()
    created_at: Time
    expected_duration_s: NonNegFloat | None = None

    @property
    def in_arrival_order(self) -> bool:
        """Whether the VC follows arrival order (first reason :data:`ARRIVAL_ORDER_REASON`):
        ``priority`` is then the submit time, comparable only with the same VC's such
        hints, and a scheduler mapping priorities to levels should treat the job as
        unhinted (neutral) and let its own age order apply."""
        return bool(self.reasons) and self.reasons[0].feature == ARRIVAL_ORDER_REASON


class PowerAction(StrEnum):
    POWER_DOWN = "power_down"
    KEEP = "keep"
    WAKE = "wake"


class PowerAdvisory(_Wire):
    """CES advice for a cluster (``node`` is None) or one node (``node`` set)."""

    kind: Literal["power_advisory"] = "power_advisory"
    cluster: Name = "default"
    node: Name | None = None
    time: Time
    action: PowerAction
    count: NonNegInt = 0
    nodes: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST)] = ()
    reason: Reason
    used_nodes: NonNegFloat | None = None
    active_nodes: NonNegInt | None = None
    total_nodes: NonNegInt | None = None
    forecast_nodes: NonNegFloat | None = None
    forecast_upper_nodes: NonNegFloat | None = None
    horizon_s: Duration | None = None
    est_energy_saved_kwh: NonNegFloat | None = None
    # Added for the job-aware policy (GPUHINT_CES_POLICY=jobs; None from the series
    # policy): every node the advice wants powered off now, not only this decision's
    # change, so an applier that reads the latest advisory after missing one still
    # knows which nodes to power down (gpuhint slurm apply-power honours it).
    off_nodes: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST)] | None = None


class ClusterLoad(_Wire):
    """Derived load of one cluster: nodes in use, idle and powered on, at one time."""

    kind: Literal["cluster_load"] = "cluster_load"
    cluster: Name = "default"
    time: Time
    total_nodes: NonNegInt
    active_nodes: NonNegInt
    used_nodes: NonNegInt
    busy_gpus: NonNegInt = 0
    total_gpus: NonNegInt = 0
    idle_nodes: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST * 4)] = ()
    unhealthy_nodes: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST * 4)] = ()


class ExpectedStart(_Wire):
    """One waiting job's expected start and its 80% band (UNIX seconds)."""

    job_id: JobId
    expected: Time
    low: Time
    high: Time


class StartForecasts(_Wire):
    """The expected starts of one VC's first waiting jobs, in rank order, at ``time``.

    Written to Redis only (``starts:{cluster}:{vc}``), like ``squeue --start`` but from
    the jobs' expected durations (docs/qssf.md, *Expected start times*).
    """

    kind: Literal["start_forecasts"] = "start_forecasts"
    cluster: Name = "default"
    vc: Name = "default"
    time: Time
    jobs: Annotated[tuple[ExpectedStart, ...], Field(max_length=MAX_LIST)] = ()


Message = Annotated[
    JobEvent | GpuSample | NodeStatus | PriorityHint | PowerAdvisory | ClusterLoad | JobRoster,
    Field(discriminator="kind"),
]
_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)
KINDS = (
    "job",
    "gpu_sample",
    "node_status",
    "priority_hint",
    "power_advisory",
    "cluster_load",
    "job_roster",
)


def encode_message(msg: BaseModel) -> bytes:
    """Serialize a contract message to compact UTF-8 JSON."""
    return msg.model_dump_json(exclude_none=True).encode()


def decode_message(raw: bytes | str | dict[str, Any], limits: Limits = DEFAULT_LIMITS) -> Message:
    """Parse and validate one message; raise :class:`InvalidMessage` with a one-line reason.

    Strict: no string-to-number or number-to-bool coercion, no NaN or infinity, and the
    :class:`Limits` (size and nesting are checked before the JSON is parsed). Every
    failure, whatever its cause, is an :class:`InvalidMessage`.
    """
    try:
        if isinstance(raw, dict):
            data = json.dumps(raw, allow_nan=False).encode()
        else:
            data = raw.encode() if isinstance(raw, str) else bytes(raw)
        if len(data) > limits.max_bytes:
            raise InvalidMessage(f"message of {len(data)} bytes exceeds {limits.max_bytes}")
        check_depth(data, limits.max_depth)
        # the common case, a valid message: one parse. Anything else takes the checks
        # below, which say what is wrong (and agree with this on what is valid).
        try:
            msg = _MESSAGE.validate_json(data, strict=True, context={"limits": limits})
        except ValidationError:
            pass
        else:
            # the parser keeps the last of duplicate keys; every key is followed by a
            # ':', so as many ':' as keys validated means there is none (the usual case)
            if "schema_version" in msg.model_fields_set and (
                data.count(b":") == count_keys(msg) or parse_strict(data) is not None
            ):
                return msg
        obj = parse_strict(data)
        if not isinstance(obj, dict):
            raise InvalidMessage(f"expected a JSON object, got {type(obj).__name__}")
        version = obj.get("schema_version")
        if type(version) is not int and version == SCHEMA_VERSION:  # 1.0, true
            raise InvalidMessage(
                f"unsupported schema_version {json.dumps(version)} ({json_type(version)}): "
                f"it must be the integer {SCHEMA_VERSION}"
            )
        if version != SCHEMA_VERSION:
            raise InvalidMessage(
                f"unsupported schema_version {short(version)} (this build reads {SCHEMA_VERSION})"
            )
        if obj.get("kind") not in KINDS:
            raise InvalidMessage(f"unknown kind {short(obj.get('kind'))} (expected one of {KINDS})")
        try:
            return _MESSAGE.validate_json(data, strict=True, context={"limits": limits})
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            loc = ".".join(str(p) for p in first["loc"][1:]) or "message"
            msg = first["msg"].removeprefix("Value error, ")
            raise InvalidMessage(f"{loc}: {msg} ({exc.error_count()} error(s))") from None
    except InvalidMessage:
        raise
    except Exception as exc:  # RecursionError, MemoryError, a bug: never escape as such
        raise InvalidMessage(f"undecodable: {type(exc).__name__}: {short(str(exc))}") from None


def decode_job_event(
    raw: bytes | str | dict[str, Any], limits: Limits = DEFAULT_LIMITS
) -> JobEvent:
    """Like :func:`decode_message` but insists on a :class:`JobEvent`."""
    msg = decode_message(raw, limits)
    if not isinstance(msg, JobEvent):
        raise InvalidMessage(f"expected kind 'job', got {msg.kind!r}")
    return msg
