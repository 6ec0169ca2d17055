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
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuhint.keys import RedisKeys
from gpuhint.topics import Topics

_CONFIG_FILE: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "gpuhint_config_file", default=None
)


class ConfigError(ValueError):
    """Bad configuration, with a message meant for the user."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUHINT_", frozen=True, extra="forbid")

    kafka_bootstrap: str = Field("localhost:9092", description="Kafka bootstrap HOST:PORT[,...]")
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
    app_id: str = Field("gpuhint", pattern=r"^[A-Za-z0-9._-]+$", description="Faust app id")
    state_dir: Path = Field(Path("var/worker"), description="worker state and checkpoints")
    checkpoint_interval_s: float = Field(60.0, gt=0)
    batch_max: int = Field(500, ge=1, description="events per worker batch before a flush")
    batch_within_s: float = Field(0.05, gt=0, description="max wait to fill a batch")
    ces_enabled: bool = Field(True, description="worker: derive cluster load, advise power")
    ces_slot_s: int = Field(600, ge=1, le=86400, description="CES slot length (10 min)")
    ces_watts_per_node: float = Field(700.0, gt=0, description="idle node draw, for kWh")
    ces_stale_after_s: float = Field(
        120.0, gt=0, description="a node silent this long counts as powered off"
    )
    node_name: str | None = Field(None, min_length=1, description="agent: node name (hostname)")
    agent_interval_s: float = Field(10.0, gt=0, le=3600, description="agent: sampling interval")
    agent_buffer_max: int = Field(10_000, ge=10, description="agent: records buffered in memory")
    agent_spill_dir: Path | None = Field(None, description="agent: spill the buffer to disk here")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics and /healthz here (unset: off)"
    )
    metrics_host: str = Field("0.0.0.0", min_length=1, description="address /metrics binds")

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        if not hosts:
            raise ValueError("expected HOST:PORT[,HOST:PORT...]")
        for h in hosts:
            host, _, port = h.removeprefix("kafka://").rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{h!r} is not HOST:PORT")
        return ",".join(hosts)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: SecretStr) -> SecretStr:
        scheme = value.get_secret_value().split("://", 1)[0]
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError("expected a redis://, rediss:// or unix:// URL")
        return value

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
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.key_prefix)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings; raise :class:`ConfigError` with a readable message if invalid."""
    path_s = config_file or os.environ.get("GPUHINT_CONFIG")
    path = Path(path_s) if path_s else None
    if path is not None and not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    token = _CONFIG_FILE.set(path)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        lines = [f"  {'.'.join(map(str, e['loc'])) or '?'}: {e['msg']}" for e in exc.errors()]
        where = f" (flags, GPUHINT_* env, file {path})" if path else " (flags or GPUHINT_* env)"
        raise ConfigError("invalid configuration" + where + ":\n" + "\n".join(lines)) from None
    except Exception as exc:  # TOML syntax errors and the like
        raise ConfigError(f"cannot read configuration {path}: {exc}") from None
    finally:
        _CONFIG_FILE.reset(token)
