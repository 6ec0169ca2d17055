"""Frozen, validated settings: defaults < config file (TOML) < environment < CLI flags.

Environment variables are ``GPUHINT_<FIELD>`` (e.g. ``GPUHINT_KAFKA_BOOTSTRAP``); a
TOML file is named by ``--config`` or ``GPUHINT_CONFIG``. Secrets (the Redis URL may
carry a password) are :class:`~pydantic.SecretStr` and never logged.

>>> s = load_settings(kafka_bootstrap="k:9092")
>>> s.kafka_bootstrap, s.topics.job_events
('k:9092', 'gpuhint.job-events')
"""

from __future__ import annotations

import contextvars
import os
import re
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuhint.wire.contract import Limits, Name
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics

_CONFIG_FILE: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "gpuhint_config_file", default=None
)


SECTIONS = ("slurm", "kueue")
"""TOML tables (``[slurm]``, ``[kueue]``) and top-level ``slurm_*`` / ``kueue_*`` keys that
belong to a command's own settings (``GPUHINT_SLURM_*``, ``GPUHINT_KUEUE_*``), not to
:class:`Settings`."""

OTHER_ENV = frozenset(
    {
        "GPUHINT_CONFIG",
        "GPUHINT_LOG_LEVEL",
        "GPUHINT_AGENT_ARGS",  # deploy/gpuhint-agent.service
        "GPUHINT_AGENT_NVML",  # docker-compose.yml
        "GPUHINT_REDIS_PASSWORD",  # docker-compose.yml
        "GPUHINT_KAFKA_DATA",  # scripts/kafka/run-kafka.sh
        "GPUHINT_KAFKA_LIBS",
        "GPUHINT_REDIS_DATA",  # scripts/run-redis.sh
        "GPUHINT_VENV",  # scripts/*.sh
        "GPUHINT_KUBE_VERSION",  # scripts/k8s/build.sh
        "GPUHINT_KUEUE_VERSION",
        "GPUHINT_GO_TOOLCHAIN",
    }
)
"""``GPUHINT_*`` names read outside :class:`Settings` (scripts, deploy files)."""
OTHER_ENV_PREFIXES = ("GPUHINT_TEST_", "GPUHINT_BENCH_", "GPUHINT_CHAOS_")


class ConfigError(ValueError):
    """Bad configuration, with a message meant for the user."""


class _FieldsError(ValueError):
    """A check across settings (a model validator) that names the settings involved."""

    def __init__(self, message: str, *fields: str) -> None:
        super().__init__(message)
        self.fields = fields


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUHINT_", frozen=True, extra="forbid")

    kafka_bootstrap: str = Field("localhost:9092", description="Kafka bootstrap HOST:PORT[,...]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka transport: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism (with SASL_*): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
    )
    kafka_sasl_username: str | None = Field(None, min_length=1)
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (secret)")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle (PEM) to verify the broker")
    kafka_ssl_certfile: Path | None = Field(None, description="client certificate (PEM), mTLS")
    kafka_ssl_keyfile: Path | None = Field(None, description="client private key (PEM), mTLS")
    kafka_ssl_check_hostname: bool = Field(True, description="verify the broker's host name")
    kafka_retry_s: float = Field(
        300.0, ge=0, description="replay, worker: keep retrying an unreachable broker this long"
    )
    redis_url: SecretStr = Field(
        SecretStr("redis://localhost:6379/0"), description="redis:// URL (may hold a password)"
    )
    topic_prefix: str = Field("gpuhint", pattern=r"^[A-Za-z0-9._-]+$")
    key_prefix: str = Field("gpuhint", pattern=r"^[A-Za-z0-9._-]+$")
    cluster: str = Field(
        "default", min_length=1, pattern=r"^[^:\s]+$", description="cluster name for events"
    )
    partitions: int = Field(8, ge=1, le=1024, description="partitions of the job-event topic")
    replication_factor: int = Field(
        1, ge=1, le=16, description="replicas of topics gpuhint creates (3 in production)"
    )
    hint_ttl_s: int = Field(7 * 86400, ge=60, description="a hint key expires after this")
    advisory_ttl_s: int = Field(3600, ge=60)
    changes_maxlen: int = Field(100_000, ge=100, description="approximate change-stream length")
    model: str = Field("history_mix", description="duration model for QSSF hints")
    qssf_wait_bound: float = Field(
        16.0,  # models.wait_bound.DEFAULT_WAIT_BOUND (config sits above models)
        ge=0,
        le=1e6,
        description="QSSF starvation bound: a job that has waited over this x the longest "
        "wait FIFO gave in its VC so far goes to the front; 0 turns it off (docs/qssf.md)",
    )
    app_id: str = Field("gpuhint", pattern=r"^[A-Za-z0-9._-]+$", description="Faust app id")
    state_dir: Path = Field(Path("var/worker"), description="worker state and checkpoints")
    checkpoint_interval_s: float = Field(60.0, gt=0)
    worker_session_timeout_s: float = Field(
        6.0,
        ge=1,
        le=300,
        description="worker: a silent worker loses its partitions after this (6 s: Kafka's "
        "default group.min.session.timeout.ms; the heartbeat runs in Faust's consumer thread)",
    )
    worker_heartbeat_s: float = Field(1.0, gt=0, le=60, description="worker: heartbeat interval")
    worker_instance_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="worker: static group membership id (stable per replica, e.g. pod name)",
    )
    worker_lean_fetch: bool = Field(
        True,
        description="worker: hand fetched messages to the stream inline "
        "(streams/faust_consumer.py; false: Faust's own loop)",
    )
    worker_assign_by_load: bool = Field(
        True,
        description="worker, as group leader: deal job-event partitions by their load "
        "(events handled + lag) when that evens the busiest worker's share by 10%+ "
        "(streams/faust_assignor.py; false: Faust's count-balanced assignment)",
    )
    worker_rebalance_for_load: bool = Field(
        True,
        description="worker, as group leader: ask the group to rebalance when a deal by "
        "load would spare the busiest worker enough (the thresholds below); needs "
        "worker_assign_by_load",
    )
    worker_rebalance_min_gain: float = Field(
        0.2,
        ge=0.1,  # no lower than the deal's own threshold, or it asks for deals it refuses
        lt=1,
        description="worker: a rebalance for load must lower the busiest worker's load by "
        "this share",
    )
    worker_rebalance_min_events: int = Field(
        50_000,
        ge=0,
        description="worker: ... and by this many events (lag + 10 s at the recent rate; "
        "a rebalance pauses the group ~3 s: 50,000 is ~10 s of one worker at 5,000/s)",
    )
    worker_rebalance_cooldown_s: float = Field(
        30.0,
        ge=1,
        description="worker: no rebalance for load within this long of the last rebalance",
    )
    worker_stream_buffer: int = Field(
        16384,
        ge=64,
        le=1_000_000,
        description="worker: fetched messages buffered per stream before the fetch pauses",
    )
    state_max_live_vcs: int = Field(
        2000,
        ge=10,
        description="worker: VC states kept decoded in memory; idle ones beyond this are "
        "evicted (kept as bytes) and decoded again on their next event",
    )
    state_max_record_bytes: int = Field(
        512 * 1024,
        ge=4096,
        le=900_000,
        description="worker: a VC state record larger than this is split into parts, so no "
        "record exceeds the broker's message size (Kafka's default is 1 MB)",
    )
    batch_max: int = Field(500, ge=1, description="events per worker batch before a flush")
    batch_within_s: float = Field(0.01, gt=0, description="max wait to fill a batch")
    state_save_interval_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="worker: save touched VC state at most this often (0: every batch)",
    )
    gc_freeze_interval_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="worker: freeze the surviving heap this often, so full garbage "
        "collections walk only new objects (0: CPython's own schedule)",
    )
    gc_full_interval_s: float = Field(
        600.0,
        ge=1,
        description="worker: unfreeze and collect the whole heap this often (frozen cycles)",
    )
    ces_enabled: bool = Field(True, description="worker: derive cluster load, advise power")
    ces_slot_s: int = Field(600, ge=1, le=86400, description="CES slot length (10 min)")
    ces_watts_per_node: float = Field(700.0, gt=0, description="idle node draw, for kWh")
    ces_stale_after_s: float = Field(
        120.0, gt=0, description="a node silent this long counts as powered off"
    )
    ces_forget_node_after_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="a node with no job silent this long left the cluster (removed, "
        "renamed): no longer counted, named in advice nor checkpointed",
    )
    ces_policy: Literal["jobs", "series"] = Field(
        "jobs",
        description="worker: power advice from the job events (queue, predicted ends, "
        "arrivals; per-node) or from the node-count series forecast (docs/ces.md, Online)",
    )
    ces_quantile: float = Field(
        0.98, ge=0, le=1, description="jobs policy: reserve quantile of arrivals (its knob)"
    )
    ces_boot_s: float = Field(
        300.0, ge=0, le=86400, description="jobs policy: a node's boot time (ResumeTimeout)"
    )
    ces_confirm_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="jobs policy: how long advice is believed before node status overrides "
        "it (>= the applier's interval plus a node's power-off time)",
    )
    ces_max_cycles_per_node_day: int = Field(
        6, ge=1, le=1440, description="jobs policy: power-downs of one node in any 24 h, at most"
    )
    node_name: Name | None = Field(
        None, description="agent: node name (hostname); no ':' or whitespace, <= 128 characters"
    )
    agent_interval_s: float = Field(10.0, gt=0, le=3600, description="agent: sampling interval")
    agent_buffer_max: int = Field(10_000, ge=10, description="agent: records buffered in memory")
    agent_spill_dir: Path | None = Field(None, description="agent: spill the buffer to disk here")
    agent_roster_every_s: float = Field(
        300.0, ge=0, le=86400, description="agent: seconds between job rosters (0: none)"
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics and /healthz here (unset: off)"
    )
    metrics_host: str = Field("0.0.0.0", min_length=1, description="address /metrics binds")
    max_gpus_per_job: int = Field(
        2048, ge=1, le=65536, description="decode: a job asking for more GPUs is rejected"
    )
    max_nodes_per_job: int = Field(512, ge=1, le=4096, description="decode: nodes of one job")
    max_message_bytes: int = Field(
        256 * 1024, ge=1024, le=16 * 1024 * 1024, description="decode: larger messages rejected"
    )
    max_future_s: float = Field(
        86400.0, ge=0, description="decode: how far ahead of now an event's time may be"
    )
    dead_letter_max_bytes: int = Field(
        900_000,
        ge=4096,
        description="dead-letter records are cut to fit (below the broker max.message.bytes)",
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        if not hosts:
            raise ValueError("expected HOST:PORT[,HOST:PORT...]")
        for h in hosts:
            scheme, sep, _ = h.partition("://")
            if sep and scheme.lower() != "kafka":
                raise ValueError(
                    f"{h!r}: a {scheme}:// bootstrap is not supported; give HOST:PORT and set "
                    "GPUHINT_KAFKA_SECURITY_PROTOCOL (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
                )
            host, _, port = h.removeprefix("kafka://").rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{h!r} is not HOST:PORT")
        return ",".join(hosts)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        scheme = url.split("://", 1)[0]
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError("expected a redis://, rediss:// or unix:// URL")
        if scheme != "unix":
            parts = urlsplit(url)  # a '/', '?' or '#' in the password cuts the host short:
            if "@" in parts.path + parts.fragment + parts.query.partition("=")[0]:  # echo none
                raise ValueError("a '/', '?' or '#' in the password: percent-encode it")
            db = parts.path.strip("/")
            if db and (not db.isdigit() or int(db) > 15):
                raise ValueError(f"Redis db {db!r} in the URL path is not a number 0-15")
        return value

    @model_validator(mode="after")
    def _ces_forget_after_stale(self) -> Self:
        if self.ces_forget_node_after_s < self.ces_stale_after_s:
            raise _FieldsError(
                "a node must count as powered off (GPUHINT_CES_STALE_AFTER_S) before it is "
                "forgotten (GPUHINT_CES_FORGET_NODE_AFTER_S)",
                "ces_forget_node_after_s",
            )
        return self

    @model_validator(mode="after")
    def _kafka_security(self) -> Self:
        sasl = self.kafka_security_protocol.startswith("SASL_")
        sasl_fields = ("kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password")
        if sasl and not all(getattr(self, f) for f in sasl_fields):
            raise _FieldsError(
                f"security protocol {self.kafka_security_protocol} needs "
                "GPUHINT_KAFKA_SASL_MECHANISM, _USERNAME and _PASSWORD",
                "kafka_security_protocol",
                *(f for f in sasl_fields if not getattr(self, f)),
            )
        if not sasl and (self.kafka_sasl_mechanism or self.kafka_sasl_username):
            raise _FieldsError(
                "SASL settings are given but GPUHINT_KAFKA_SECURITY_PROTOCOL is "
                f"{self.kafka_security_protocol} (use SASL_SSL or SASL_PLAINTEXT)",
                "kafka_security_protocol",
                *(f for f in sasl_fields[:2] if getattr(self, f)),
            )
        proto = self.kafka_security_protocol
        for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not proto.endswith("SSL"):  # else plaintext, silently
                why = f"a TLS file, but GPUHINT_KAFKA_SECURITY_PROTOCOL is {proto}"
                raise _FieldsError(why + " (use SSL or SASL_SSL)", "kafka_security_protocol", name)
            if path is not None and not path.is_file():
                raise _FieldsError(f"{path} is not a readable file", name)
        if (self.kafka_ssl_certfile is None) != (self.kafka_ssl_keyfile is None):
            pair = ("kafka_ssl_certfile", "kafka_ssl_keyfile")
            raise _FieldsError(" and ".join(pair) + " go together", *pair)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _CONFIG_FILE.get()
        if path is not None:
            sources.append(_CommonToml(settings_cls, toml_file=path))
        return tuple(sources)

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.key_prefix)

    @property
    def limits(self) -> Limits:
        """What the worker's decoder accepts (see :class:`gpuhint.wire.contract.Limits`)."""
        return Limits(
            max_bytes=self.max_message_bytes,
            max_gpus=self.max_gpus_per_job,
            max_nodes=self.max_nodes_per_job,
            max_future_s=self.max_future_s,
        )


class _CommonToml(TomlConfigSettingsSource):
    """The TOML file without the commands' own sections (:data:`SECTIONS`)."""

    def _read_files(self, files: Any, deep_merge: bool = False) -> dict[str, Any]:
        data = super()._read_files(files, deep_merge=deep_merge)
        return {k: v for k, v in data.items() if _section_of(k) is None}


def _section_of(key: str) -> str | None:
    for name in SECTIONS:
        if key == name or key.startswith(name + "_"):
            return name
    return None


def config_path(config_file: str | Path | None = None) -> Path | None:
    """The TOML file: ``config_file`` (``--config``), else ``GPUHINT_CONFIG``, else none."""
    path_s = config_file or os.environ.get("GPUHINT_CONFIG")
    path = Path(path_s) if path_s else None
    if path is not None and not path.is_file():
        what = "is a directory, not a TOML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {path} {what}")
    return path


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings; raise :class:`ConfigError` with a readable message if invalid."""
    path = config_path(config_file)
    token = _CONFIG_FILE.set(path)
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        lines = [_describe(e, given, path) for e in exc.errors(include_url=False)]
        where = f" (flags, GPUHINT_* env, file {path})" if path else " (flags or GPUHINT_* env)"
        raise ConfigError("invalid configuration" + where + ":\n" + "\n".join(lines)) from None
    except Exception as exc:  # TOML syntax errors and the like
        what = f"configuration file {path}" if path else "the configuration"
        raise ConfigError(f"cannot read {what}: {type(exc).__name__}: {exc}") from None
    finally:
        _CONFIG_FILE.reset(token)


def _describe(error: Any, given: dict[str, Any], path: Path | None) -> str:
    """One line for one validation error, naming each setting as the user wrote it.

    A field's value comes from (in order) a flag, ``GPUHINT_<FIELD>``, the TOML file
    (named with its line) or the default; a check across settings names all of them.
    """
    loc = [str(p) for p in error.get("loc", ())]
    fields: tuple[str, ...] = getattr((error.get("ctx") or {}).get("error"), "fields", ())
    if loc:
        fields = (loc[0],)
    msg = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if len(loc) > 1:  # e.g. a union member or list item
        msg = f"{'.'.join(loc[1:])}: {msg}"
    names = ", ".join(_source(f, given, path) for f in fields) or "settings"
    return f"  {names}: {msg}"


def _source(field: str, given: dict[str, Any], path: Path | None) -> str:
    if field in given:
        return f"{field} (flag)"
    env = f"GPUHINT_{field}".upper()
    for name in os.environ:  # pydantic-settings matches names case-insensitively
        if name.upper() == env:
            return f"{name} ({field})"
    if path is not None:
        line = _toml_line(path, field)
        if line is not None:
            return f"{field} ({path}, line {line})"
    if field in Settings.model_fields:
        return f"GPUHINT_{field.upper()} (not set)"
    return field


def _toml_line(path: Path, key: str) -> int | None:
    """The line of ``path`` that sets ``key`` at the top level, if one plainly does."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""")
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):
            return None  # a table: keys below are not top-level settings
        if pattern.match(line):
            return number
    return None
