"""Settings of the Slurm appliers: ``GPUHINT_SLURM_*`` env vars, overridden by flags."""

from __future__ import annotations

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuhint.slurm.priority import MAX_SITE_FACTOR


class SlurmSettingsError(ValueError):
    """Invalid ``GPUHINT_SLURM_*`` settings (one readable message); ``field`` names the
    setting, ``reason`` what is wrong with it (a command line names its own flag)."""

    def __init__(self, message: str, field: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.field, self.reason = field, reason


class SlurmSettings(BaseSettings):
    """What the appliers need besides Redis and the cluster name (gpuhint's Settings)."""

    model_config = SettingsConfigDict(env_prefix="GPUHINT_SLURM_", frozen=True, extra="ignore")

    conf: str | None = Field(None, description="slurm.conf (else SLURM_CONF / Slurm's default)")
    interval_s: float = Field(30.0, gt=0, le=3600, description="seconds between full passes")
    max_factor: int = Field(100_000, ge=1, le=MAX_SITE_FACTOR, description="SiteFactor of p = 0")
    p0: float = Field(60.0, gt=0, description="GPU-seconds at which the log map bends")
    p_max: float = Field(64 * 30 * 86400.0, gt=0, description="GPU-seconds mapped to 0")
    rate: float = Field(2000.0, gt=0, description="at most this many job updates per second")
    max_updates: int = Field(20_000, ge=1, description="at most this many job updates a pass")
    neutral: str = Field(
        "median",
        description="SiteFactor of a pending job without a hint, and what stale hints fade "
        "to: median (of the hinted pending jobs), midpoint (max_factor / 2), a factor, "
        "or off (leave unhinted jobs alone)",
    )
    stale_after_s: float = Field(
        3600.0, gt=0, description="no new hint / load summary for this long: hints fade"
    )
    fade_s: float = Field(1800.0, ge=0, description="the fade to neutral takes this long")
    start_comment: bool = Field(
        True,
        description="write each pending job's expected start into its Comment (only an "
        "empty or gpuhint's own comment; docs/slurm.md)",
    )
    power_interval_s: float = Field(60.0, gt=0, le=3600)
    min_idle: int = Field(1, ge=0, description="idle powered-on nodes kept for new jobs")
    min_on: int = Field(1, ge=0, description="never fewer powered-on nodes")
    advice_max_age_s: float = Field(1800.0, gt=0, description="older advice is ignored")
    exclude_nodes: str = Field("", description="Slurm host list never powered down or up")
    resume_timeout_s: float = Field(
        900.0, gt=0, description="a node not up this long after power_up is a failed resume"
    )

    @field_validator("neutral")
    @classmethod
    def _neutral(cls, v: str) -> str:
        v = v.strip().lower()
        if v in ("median", "midpoint", "off") or (v.isdigit() and int(v) <= MAX_SITE_FACTOR):
            return v
        raise ValueError("must be median, midpoint, off or a factor (an integer >= 0)")

    @property
    def neutral_mode(self) -> str | int:
        """``neutral`` as :class:`gpuhint.slurm.priority.Fallback` takes it."""
        return int(self.neutral) if self.neutral.isdigit() else self.neutral


def load_slurm_settings(**overrides: object) -> SlurmSettings:
    try:
        return SlurmSettings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(map(str, e["loc"]))
        raise SlurmSettingsError(
            f"GPUHINT_SLURM_{loc.upper()} ([slurm] {loc} in the config file): {e['msg']}",
            field=loc,
            reason=e["msg"],
        ) from None
