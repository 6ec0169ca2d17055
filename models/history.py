"""The paper's history rule: predict a job's duration from its user's past jobs.

Mean duration of the same user with the same GPU count, else of the same user, else
of the whole VC, else a prior (the expected duration; the point forecast is that mean
kept within the 80% band, which is built in log). Statistics are kept per ``cluster/vc`` so that the
state of one VC lives on the Kafka partition that carries that VC's events.

The state is any ``MutableMapping[str, list[float]]``: a dict in embedded mode, a
changelog-backed Faust table in the streaming worker.

>>> from gpuhint.wire.contract import JobEvent
>>> m = HistoryEstimator()
>>> job = JobEvent(phase="submitted", job_id="1", user="u", num_gpus=1, time=0, submit_time=0)
>>> m.learn(job, 100.0); m.learn(job, 300.0)
>>> m.predict(job).duration_s
200.0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import MutableMapping

from gpuhint.wire.contract import JobEvent
from models.base import DurationPrediction
from models.limit_ratio import _escaped

# Stats vector: [count, sum of durations, sum of log1p, sum of log1p squared]
Stats = list[float]


def _prefix(job: JobEvent) -> str:
    return f"{_escaped(job.cluster)}|{_escaped(job.vc)}|"


class HistoryEstimator:
    """Paper baseline: per-(user, GPUs) mean, falling back to per-user, then per-VC."""

    name = "history"
    version = "1"
    max_keys = 200_000
    """At most this many keys (least recently learned dropped); also what a state
    pickled before the bound gets."""

    def __init__(
        self,
        state: MutableMapping[str, Stats] | None = None,
        prior_duration_s: float = 3600.0,
        prior_log_std: float = 2.0,
        max_keys: int = 200_000,
    ) -> None:
        self.state: MutableMapping[str, Stats] = state if state is not None else {}
        self.prior_duration_s = prior_duration_s
        self.prior_log_std = prior_log_std
        self.max_keys = max_keys

    def _keys(self, job: JobEvent) -> list[tuple[str, str]]:
        # names escaped: a user named ``alice|g|1`` is not alice's 1-GPU key (names
        # without ``|`` or ``\\`` keep the keys they had, so older pickles match)
        p = _prefix(job)
        keys = []
        if job.user:
            u = _escaped(job.user)
            keys.append(("user+gpus", f"{p}u|{u}|g|{job.num_gpus}"))
            keys.append(("user", f"{p}u|{u}"))
        keys.append(("vc", f"{p}all"))
        return keys

    def predict(self, job: JobEvent) -> DurationPrediction:
        """Pure. A job's time limit bounds the prediction (it cannot outrun it)."""
        p = self._predict(job)
        lim = job.time_limit_s
        if lim is None or lim <= 0 or p.expected_s <= lim:
            return p
        return DurationPrediction.from_log(
            math.log1p(lim),
            p.log_std,
            point_s=lim,
            reasons=(*p.reasons, ("time_limit", lim)),
        )

    def _predict(self, job: JobEvent) -> DurationPrediction:
        for level, key in self._keys(job):
            s = self.state.get(key)
            if s and s[0] > 0:
                n, total, slog, slog2 = s
                mean_log = slog / n
                var = max(0.0, slog2 / n - mean_log * mean_log)
                std = math.sqrt(var) if n > 1 else self.prior_log_std
                p = DurationPrediction.from_log(
                    mean_log, std, reasons=((f"history:{level}", n),), expected_s=total / n
                )
                # the point forecast is the mean, kept inside the band (built in log:
                # a heavy tail can put the mean past its p90); QSSF ranks by the mean
                point = min(max(p.expected_s, p.p10_s), p.p90_s)
                return dataclasses.replace(p, duration_s=point)
        return DurationPrediction.from_log(
            math.log1p(self.prior_duration_s),
            self.prior_log_std,
            point_s=self.prior_duration_s,
            reasons=(("prior", 0.0),),
        )

    def predict_one(self, job: JobEvent) -> DurationPrediction:
        """River's convention (pure): :meth:`predict`, which keeps no submit state."""
        return self.predict(job)

    def learn_one(self, job: JobEvent, duration_s: float) -> None:
        self.learn(job, duration_s)

    def observe_start(self, job: JobEvent) -> None:
        """Nothing to do: the paper's rule learns at finish only."""

    def forget(self, job: JobEvent) -> None:
        """Nothing to do: the paper's rule keeps no state per waiting or running job."""

    def expected_one(self, job: JobEvent, now: float | None = None) -> float:
        """Expected duration now (pure): the point value, a mean of durations."""
        return self.predict(job).expected_s

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        """The keys whose change moves this job's prediction (user+GPUs, user)."""
        return tuple(k for lv, k in self._keys(job) if lv != "vc")

    def learn(self, job: JobEvent, duration_s: float) -> None:
        lg = math.log1p(max(0.0, duration_s))
        state = self.state
        for _, key in self._keys(job):
            # popped and written anew: a new list (a Faust table only records a change
            # on assignment), and the key moves to the end (least recently learned first)
            s = state.pop(key, None) or [0.0, 0.0, 0.0, 0.0]
            state[key] = [s[0] + 1, s[1] + duration_s, s[2] + lg, s[3] + lg * lg]
        while len(state) > self.max_keys:  # bounded: many distinct users over a long run
            del state[next(iter(state))]
