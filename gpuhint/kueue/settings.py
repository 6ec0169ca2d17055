"""Settings of the Kueue applier: ``GPUHINT_KUEUE_*`` env vars, overridden by CLI flags.

Redis, the key prefix and the cluster name come from the common settings
(``GPUHINT_REDIS_URL``, ``GPUHINT_KEY_PREFIX``, ``GPUHINT_CLUSTER``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class KueueSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUHINT_KUEUE_", frozen=True, extra="forbid")

    kubeconfig: str | None = Field(None, description="kubeconfig file (else in-cluster)")
    context: str | None = Field(None, description="kubeconfig context")
    classes: int = Field(10, ge=2, le=100, description="WorkloadPriorityClasses in the ladder")
    base: int = Field(0, ge=-(10**9), le=10**9 - 100, description="value of gpuhint-00")
    min_service_s: float = Field(600.0, gt=0, description="GPU-s at and below: top class")
    max_service_s: float = Field(8 * 8 * 86400.0, gt=0, description="GPU-s at and above: bottom")
    interval_s: float = Field(5.0, gt=0, le=3600, description="seconds between passes")
    rate: float = Field(20.0, ge=0, description="Job patches per second (0: unlimited)")
    burst: int = Field(50, ge=1, description="patches allowed at once above the rate")
    workers: int = Field(4, ge=1, le=64, description="concurrent patches")
    neutral: str = Field(
        "median",
        description="class of a waiting Workload without a hint, and what stale hints "
        "fade to: median (of the hinted waiting Workloads), midpoint (classes // 2), a "
        "rung number 0..classes-1, or off (leave Workloads without a hint alone)",
    )
    stale_after_s: float = Field(
        3600.0, gt=0, description="no new hint / load summary for this long: hints fade"
    )
    fade_s: float = Field(1800.0, ge=0, description="the fade to neutral takes this long")
    start_annotations: bool = Field(
        True,
        description="annotate each waiting Workload with its expected start "
        "(gpuhint.io/expected-start, -band, -asof; docs/kubernetes.md)",
    )

    @field_validator("neutral")
    @classmethod
    def _neutral(cls, v: str) -> str:
        v = str(v).strip().lower()
        if v in ("median", "midpoint", "off") or v.isdigit():
            return v
        raise ValueError("must be median, midpoint, off or a rung number")

    @property
    def neutral_mode(self) -> str | int:
        return int(self.neutral) if self.neutral.isdigit() else self.neutral

    @model_validator(mode="after")
    def _bands(self) -> KueueSettings:
        if self.min_service_s >= self.max_service_s:
            raise ValueError("min_service_s must be below max_service_s")
        if self.neutral.isdigit() and int(self.neutral) >= self.classes:
            raise ValueError(f"neutral rung must be below classes ({self.classes})")
        return self


class KueueSettingsError(ValueError):
    pass


def load_kueue_settings(**overrides: Any) -> KueueSettings:
    try:
        return KueueSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()]
        raise KueueSettingsError(
            "invalid Kueue settings (flags or GPUHINT_KUEUE_* env): " + "; ".join(lines)
        ) from None
