"""The QSSF hint core: job events in, priority hints out. No I/O of its own.

The embedded ``gpuhint demo`` and the Faust worker both drive this same class; they
differ only in where events come from and which store (and state mappings) they pass.

* ``submitted``: predict duration, write a :class:`PriorityHint` (priority = GPUs x the
  model's *expected* duration, ``DurationPrediction.expected_s``: the mean, not the point
  forecast, since QSSF minimizes mean JCT under uncertainty; see docs/qssf.md).
* ``started``:   remove the hint (the scheduler has placed the job).
* ``finished``:  remove the hint, learn from the true duration, score the prediction.

>>> from gpuhint.store import InMemoryStore
>>> from models.history import HistoryEstimator
>>> from gpuhint.contract import JobEvent
>>> store = InMemoryStore()
>>> engine = HintEngine(HistoryEstimator(), store)
>>> hint = engine.on_job_event(
...     JobEvent(phase="submitted", job_id="7", num_gpus=4, time=0, submit_time=0))
>>> _ = store.flush(); store.queue("default", "default")
[('7', 14400.0)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

from gpuhint.contract import FeatureContribution, JobEvent, JobPhase, PriorityHint
from gpuhint.store import HintStore
from models.base import DurationModel


@dataclass
class EngineStats:
    """Counters a user wants to see: what went through, and how good predictions were."""

    events: int = 0
    submitted: int = 0
    started: int = 0
    finished: int = 0
    hints_written: int = 0
    hints_removed: int = 0
    """Removal requests: one per started and per finished event (idempotent in the store)."""
    learned: int = 0
    scored: int = 0
    abs_log_error_sum: float = 0.0
    abs_pct_errors: list[float] = field(default_factory=list)

    @property
    def mae_log(self) -> float | None:
        return self.abs_log_error_sum / self.scored if self.scored else None

    @property
    def median_abs_pct_error(self) -> float | None:
        if not self.abs_pct_errors:
            return None
        xs = sorted(self.abs_pct_errors)
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _pending_key(ev: JobEvent) -> str:
    return f"{ev.cluster}|{ev.job_id}"


class HintEngine:
    """Drives a duration model over job events and writes hints to a store.

    ``predictions`` remembers each pending job's predicted duration so the engine can
    score it at finish; in the worker it is a changelog-backed Faust table.
    """

    def __init__(
        self,
        model: DurationModel,
        store: HintStore,
        predictions: MutableMapping[str, float] | None = None,
        clock: Callable[[], float] = time.time,
        keep_pct_errors: int = 100_000,
    ) -> None:
        self.model = model
        self.store = store
        self.predictions: MutableMapping[str, float] = (
            predictions if predictions is not None else {}
        )
        self.clock = clock
        self.stats = EngineStats()
        self.keep_pct_errors = keep_pct_errors

    def make_hint(self, ev: JobEvent) -> PriorityHint:
        pred = self.model.predict(ev)
        return PriorityHint(
            job_id=ev.job_id,
            cluster=ev.cluster,
            vc=ev.vc,
            user=ev.user,
            num_gpus=ev.num_gpus,
            submit_time=ev.submit_time,
            predicted_duration_s=pred.duration_s,
            priority=max(ev.num_gpus, 1) * pred.expected_s,
            duration_p10_s=pred.p10_s,
            duration_p90_s=pred.p90_s,
            log_duration_std=pred.log_std,
            model=self.model.name,
            model_version=self.model.version,
            reasons=tuple(
                FeatureContribution(feature=f, contribution=c) for f, c in pred.reasons[:5]
            ),
            created_at=self.clock(),
        )

    def on_job_event(self, ev: JobEvent) -> PriorityHint | None:
        """Process one event; return the hint written, if any."""
        s = self.stats
        s.events += 1
        if ev.phase is JobPhase.SUBMITTED:
            s.submitted += 1
            hint = self.make_hint(ev)
            self.store.put_hint(hint)
            self.predictions[_pending_key(ev)] = hint.predicted_duration_s
            s.hints_written += 1
            return hint
        self.store.remove_hint(ev.cluster, ev.vc, ev.job_id)
        s.hints_removed += 1
        if ev.phase is JobPhase.STARTED:
            s.started += 1
            return None
        s.finished += 1
        predicted = self.predictions.pop(_pending_key(ev), None)
        if ev.duration_s is not None:
            if predicted is not None:
                s.scored += 1
                s.abs_log_error_sum += abs(math.log1p(predicted) - math.log1p(ev.duration_s))
                if ev.duration_s > 0 and len(s.abs_pct_errors) < self.keep_pct_errors:
                    s.abs_pct_errors.append(abs(predicted - ev.duration_s) / ev.duration_s)
            self.model.learn(ev, ev.duration_s)
            s.learned += 1
        return None
