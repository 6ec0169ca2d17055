"""The interface every job-duration model implements (pure: no I/O, no Kafka/Redis).

A model predicts at submit from what is known then, and learns once the job
finishes. Every model is picklable (checkpoints) and must cope with unseen users,
VCs and missing optional fields; ``tests/models/test_model_contract.py`` checks this for
each model in :data:`models.registry.DURATION_MODELS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpuhint.wire.contract import JobEvent

Z90 = 1.2815515655446004  # standard normal quantile of 0.9
MAX_BAND_S = 1e15
"""The band's upper bound: a hint's duration fields are at most 1e15 s
(``gpuhint.wire.contract.NonNegFloat``); an erratic key's spread can reach past it."""


@dataclass(frozen=True, slots=True)
class DurationPrediction:
    """A duration forecast: point value, an 80% band, the expected value, and why.

    ``duration_s`` is the point forecast (what the error scores measure: typically a
    median-like value of ``log1p(duration)``). ``expected_s`` is the model's estimate of
    the *mean* duration, what QSSF ranks by (for non-preemptive scheduling under
    uncertainty the expected processing time is the right ranking key, not a median:
    see docs/qssf.md). Left out (NaN) it is ``duration_s``.

    >>> DurationPrediction(100.0, 1.0, 30.0, 300.0).expected_s
    100.0
    >>> DurationPrediction(100.0, 1.0, 30.0, 300.0, expected_s=900.0).expected_s
    900.0
    """

    duration_s: float
    log_std: float
    p10_s: float
    p90_s: float
    reasons: tuple[tuple[str, float], ...] = ()
    expected_s: float = math.nan

    def __post_init__(self) -> None:
        if math.isnan(self.expected_s):
            object.__setattr__(self, "expected_s", self.duration_s)

    @classmethod
    def from_log(
        cls,
        log_mean: float,
        log_std: float,
        point_s: float | None = None,
        reasons: tuple[tuple[str, float], ...] = (),
        expected_s: float | None = None,
    ) -> DurationPrediction:
        """Build from a prediction of ``log1p(duration)`` and its spread (``expected_s``:
        the mean duration if the model knows it, else the point value)."""
        log_std = max(0.0, log_std)
        lo = max(0.0, math.expm1(log_mean - Z90 * log_std))
        hi = min(MAX_BAND_S, max(0.0, math.expm1(min(log_mean + Z90 * log_std, 40.0))))
        point = point_s if point_s is not None else max(0.0, math.expm1(min(log_mean, 40.0)))
        return cls(
            duration_s=point,
            log_std=log_std,
            p10_s=lo,
            p90_s=hi,
            reasons=reasons,
            expected_s=point if expected_s is None else max(0.0, expected_s),
        )


@runtime_checkable
class DurationModel(Protocol):
    """A job-duration model with River's estimator conventions.

    ``predict`` is called once per job at submit (a model may remember what it knew
    then, to learn from at finish); ``predict_one`` is pure (changes no state) and gives
    the prediction from what the model knows now; ``learn`` / ``learn_one`` learn a
    finished job's duration. ``expected_one`` is the cheap, pure expected duration that
    re-ranks waiting jobs, and ``related_keys`` names the history keys a job's
    prediction depends on (waiting jobs are indexed by them; a finished job re-ranks
    the waiting jobs that share one).
    """

    name: str
    version: str

    def predict(self, job: JobEvent) -> DurationPrediction: ...

    def predict_one(self, job: JobEvent) -> DurationPrediction: ...

    def learn(self, job: JobEvent, duration_s: float) -> None: ...

    def learn_one(self, job: JobEvent, duration_s: float) -> None: ...

    def expected_one(self, job: JobEvent, now: float | None = None) -> float: ...

    def observe_start(self, job: JobEvent) -> None: ...

    def related_keys(self, job: JobEvent) -> tuple[str, ...]: ...
