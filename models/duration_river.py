"""Online duration models: keyed history features feeding a River learner.

Every model here predicts ``log1p(duration)`` at submit as

    base + correction

where ``base`` is a Hedge mix of the per-key history estimates of ``log1p(duration)``
(see :mod:`models.features`) and ``correction`` is what a River regressor, trained online
on ``log1p(duration) - base``, adds from all features. The spread of the prediction
is an online estimate of the model's own absolute log error at the most specific key
that has enough of it (scaled to a normal standard deviation), so the p10/p90 band
widens for users whose jobs the model gets wrong.

That is the point forecast (``duration_s``). The *expected* duration
(``expected_s``, what QSSF ranks by) is the credibility-weighted mean duration of the
job's keys (:meth:`models.features.HistoryFeatures.expected_duration`): for ranking
heavy-tailed jobs the mean matters, not the median (docs/qssf.md).

Features are computed at submit and kept until the job finishes, so the learner is
trained on what was known at submit (no look-ahead), as in the streaming worker.

>>> from gpuhint.wire.contract import JobEvent
>>> m = LinearDurationModel()
>>> job = JobEvent(phase="submitted", job_id="1", user="u", num_gpus=1, time=0, submit_time=0)
>>> for _ in range(5):
...     m.learn(job, 600.0)
>>> 500 < m.predict(job).duration_s < 720
True
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from typing import Any, NamedTuple

from river import forest, linear_model, optim, preprocessing, tree

from gpuhint.wire.contract import JobEvent
from models.base import DurationPrediction
from models.features import LEVELS, HistoryFeatures
from models.limit_ratio import LimitRatios

# re-exported: checkpoints and VC state pickled before the move name these classes here
from models.mixes import (
    BURST_KS,
    MEAN_EXPERTS,
    SHARE,
    GammaDeviance,
    Hedge,
    MeanMix,
    _Expert,
)

__all__ = [
    "BURST_KS",
    "MEAN_EXPERTS",
    "SHARE",
    "ForestDurationModel",
    "GammaDeviance",
    "Hedge",
    "KeyedDurationModel",
    "LinearDurationModel",
    "MeanMix",
    "TreeDurationModel",
    "_Expert",
]

MAX_LOG = math.log1p(365 * 86400.0)
"""Predictions are clipped to [0 s, one year]."""
MAX_CORRECTION = 6.0
"""The learner may move the base estimate by at most this much (log units, x400)."""
MAX_EXPECTED_S = 365 * 86400.0
"""Expected durations are clipped likewise."""
ABS_TO_STD = math.sqrt(math.pi / 2.0)
"""E|e| = sigma * sqrt(2/pi) for normal errors."""


_NO_FEATURES: dict[str, float] = {}
"""What a model without a learner keeps of a waiting job's features (never written)."""


class _Submitted(NamedTuple):
    """What a model knew about a job at submit (kept until it finishes)."""

    x: dict[str, float]
    experts: dict[str, float]
    level: str
    base: float
    correction: float
    gate_weight: float
    log_pred: float
    top: tuple[tuple[str, float], ...]
    expected_s: float
    mean_x: dict[str, float]
    mean_ctx: str
    limit_log: float = math.nan
    """The limit's estimate of ``log1p(duration)`` (NaN: none), the expert of
    ``hedge_limit``."""
    shown_log: float = math.nan
    """The point forecast published (``log_pred`` moved by the limit's estimate; NaN:
    ``log_pred``). ``log_pred`` stays the forecast without it, for the shared residuals."""
    shown_base: float = math.nan
    """The base ``shown_log`` comes from (``hedge_limit``'s mix; NaN: ``base``): the
    first reason of the published hint."""


_RELATED = frozenset(("burst", "name", "user+gpus"))

_DELTAS = (*(f"{lv}:med" for lv in (*LEVELS, "global")), "user+gpus:fast", "gpus:fast")
"""Experts whose difference from the mix is a feature of the River learner."""
_DELTA_FEATURES = tuple((name, f"d:{name}") for name in _DELTAS)


class KeyedDurationModel:
    """Base of the models here: history experts mixed by Hedge, a River correction.

    Subclasses override :meth:`_correct` and :meth:`_learn_correction`; this class on
    its own predicts the Hedge mix of the keyed history statistics
    (``history_mix``), no River learner.
    """

    name = "history_mix"
    version = "5"

    def __init__(
        self,
        features: HistoryFeatures | None = None,
        hedge: Hedge | None = None,
        prior_log_std: float = 2.0,
        max_pending: int = 200_000,
    ) -> None:
        self.hist = features if features is not None else HistoryFeatures()
        self.hedge = hedge if hedge is not None else Hedge()
        # second stage: trust the learner's correction only where it has paid off
        self.gate = Hedge()
        self.use_learner = type(self)._correct is not KeyedDurationModel._correct
        self.prior_log_std = prior_log_std
        self.max_pending = max_pending
        # the rank: a learned mix of mean estimates (seconds)
        experts = (*MEAN_EXPERTS, "learner") if self.use_learner else MEAN_EXPERTS
        # the fixed share for the burst posteriors alone; with a learner's expert in
        # the mix the share broke river_linear's Venus rank (docs/qssf.md, "Fixed share")
        self.mean_mix = MeanMix(experts, share=0.0 if self.use_learner else SHARE)
        # jobs with the limit's estimate (models/limit_ratio.py): the rank's mix and the
        # point forecast's Hedge again with one more expert, learned from those jobs
        # only; every shared part (the mixes above, the learner, the residuals) learns
        # exactly as without it
        self.limits = LimitRatios()
        self.mean_mix_limit = MeanMix((*experts, "limit"), share=self.mean_mix.share)
        self.hedge_limit = Hedge()
        # job key -> what was known at submit, for learning at finish
        self._pending: OrderedDict[str, _Submitted] = OrderedDict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "hedge_limit" not in state:  # pickled before the limit's estimate: from now
            mm = self.mean_mix
            self.limits = LimitRatios()
            self.mean_mix_limit = MeanMix((*mm.experts, "limit"), share=mm.share)
            self.hedge_limit = Hedge()

    def _mix(self, mean_x: dict[str, float]) -> MeanMix:
        """The rank's mix for these mean estimates (with the limit's, or without)."""
        return self.mean_mix_limit if "limit" in mean_x else self.mean_mix

    # -- learner hooks ----------------------------------------------------------------
    def _correct(self, x: dict[str, float]) -> float:
        return 0.0

    def _learn_correction(self, x: dict[str, float], target: float) -> None:
        return None

    def _contributions(self, x: dict[str, float]) -> list[tuple[str, float]]:
        """Feature contributions to the correction (log units), largest first."""
        return []

    # -- DurationModel ----------------------------------------------------------------
    def _submit(self, job: JobEvent, touch: bool = True) -> _Submitted:
        # the context features feed only the learner: a model without one skips them;
        # ``touch=False`` (predict_one): the keys' LRU order stays as it was
        x, experts, level, parts = self.hist.features_parts(job, self.use_learner, touch)
        base, top = self.hedge.predict(level, experts)
        if self.use_learner:
            get = experts.get
            for name, feature in _DELTA_FEATURES:
                x[feature] = get(name, base) - base
        corr = 0.0
        gate_w = 0.0
        if self.use_learner:
            corr = self._correct(x)
            # NaN first: ``min(6, nan)`` is 6, a NaN would be the largest correction
            corr = max(-MAX_CORRECTION, min(MAX_CORRECTION, corr)) if corr == corr else 0.0
            gate_w = self.gate.weights(level, ["mix", "learner"])[1]
        cap = MAX_LOG
        if job.time_limit_s is not None and job.time_limit_s > 0:
            cap = min(cap, math.log1p(job.time_limit_s))  # it cannot outrun its limit
        log_pred = min(cap, max(0.0, base + gate_w * corr))
        mean_x = self._mean_x(job, parts, gate_w * corr)
        expected = self._rank(job, level, mean_x)
        # without a learner nothing reads ``x`` again: keep none of it per waiting job (a
        # waiting job's memo is pickled with the VC state at every save)
        kept_x = x if self.use_learner else _NO_FEATURES
        limit_log = shown = base_l = math.nan
        from_limit = self.limits.estimate(job)
        if from_limit is not None:  # a mix of its own: the shared state stays as without
            limit_log = math.log1p(from_limit[1])
            base_l, top = self.hedge_limit.predict(level, {**experts, "limit": limit_log})
            shown = min(cap, max(0.0, base_l + gate_w * corr))
        return _Submitted(
            kept_x, experts, level, base, corr, gate_w, log_pred, top, expected, mean_x, level,
            limit_log, shown, base_l,
        )  # fmt: skip

    def _mean_x(
        self, job: JobEvent, parts: tuple[str, float, float, float], corr: float
    ) -> dict[str, float]:
        """The mean estimates the rank mixes (seconds, each capped like the result)."""
        _, prior, total, n = parts
        lim = job.time_limit_s
        cap = min(MAX_EXPECTED_S, lim) if lim is not None and lim > 0 else MAX_EXPECTED_S
        mx: dict[str, float] = {}
        for k, name in zip(BURST_KS, MEAN_EXPERTS, strict=True):
            est = prior if n == 0 and total == 0.0 else (k * prior + total) / (k + n)
            mx[name] = min(cap, est)
        if self.use_learner:
            mx["learner"] = min(cap, mx["k1"] * math.exp(corr))
        from_limit = self.limits.estimate(job)
        if from_limit is not None:
            mx["limit"] = min(cap, from_limit[0])
        return mx

    def predict(self, job: JobEvent) -> DurationPrediction:
        """Predict at submit and remember what was known then (for :meth:`learn`)."""
        self.hist.observe_submit(job)
        sub = self._submit(job)
        jk = self.hist.job_key(job)
        self._pending[jk] = sub
        self._pending.move_to_end(jk)
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)
        return self._prediction(job, sub)

    def predict_one(self, job: JobEvent) -> DurationPrediction:
        """River's convention: the prediction from what the model knows now; pure."""
        return self._prediction(job, self._submit(job, touch=False))

    def learn_one(self, job: JobEvent, duration_s: float) -> None:
        """River's convention: :meth:`learn`."""
        self.learn(job, duration_s)

    def expected_one(self, job: JobEvent, now: float | None = None) -> float:
        """The job's expected duration from what the model knows at ``now`` (pure,
        cheap): what a waiting job is re-ranked by when a job it bears on finishes."""
        parts = self.hist.expected_parts(job, now)
        corr = 0.0
        if self.use_learner:
            sub = self._pending.get(self.hist.job_key(job))
            if sub is not None:  # the learner's correction as it was at submit
                corr = sub.gate_weight * sub.correction
        return self._rank(job, parts[0], self._mean_x(job, parts, corr))

    def _rank(self, job: JobEvent, level: str, mean_x: dict[str, float]) -> float:
        """The learned mix of the mean estimates, capped by the time limit and a year."""
        est = min(MAX_EXPECTED_S, self._mix(mean_x).predict(level, mean_x))
        lim = job.time_limit_s
        return min(est, lim) if lim is not None and lim > 0 else est

    def observe_start(self, job: JobEvent) -> None:
        """A job started: its burst's running time counts from now on, and the rank's
        mix will learn from the mean estimates as they were now (when it was picked)."""
        jk = self.hist.job_key(job)
        sub = self._pending.get(jk)
        if sub is not None:
            t = job.start_time if job.start_time is not None else job.time
            parts = self.hist.expected_parts(job, t)
            mx = self._mean_x(job, parts, sub.gate_weight * sub.correction)
            self._pending[jk] = sub._replace(mean_x=mx, mean_ctx=parts[0])
        self.hist.observe_start(job)

    def forget(self, job: JobEvent) -> None:
        """A job ended without a duration (cancelled, waiting or running): nothing to
        learn, but it no longer waits or runs (its running time stops counting as its
        burst's evidence, its queue state and submit memo are released)."""
        self._pending.pop(self.hist.job_key(job), None)
        self.hist.forget(job)

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        """History keys whose change moves this job's expected duration, most specific
        first (its burst, name template and user+GPUs): the index of waiting jobs."""
        return tuple(k for lv, k in self.hist.job_keys(job) if lv in _RELATED)

    def _prediction(self, job: JobEvent, sub: _Submitted) -> DurationPrediction:
        spread = self.hist.spread(job)
        log_std = spread * ABS_TO_STD if spread is not None else self.prior_log_std
        # contributions in log1p-seconds: the base, then what moved it
        base = sub.base if math.isnan(sub.shown_base) else sub.shown_base
        reasons: list[tuple[str, float]] = [(f"history:{sub.level}", round(base, 4))]
        mix = [(f"mix:{n}", round(c, 4)) for n, c in sub.top]
        if self.use_learner:
            reasons.append(("learner:correction", round(sub.gate_weight * sub.correction, 4)))
            reasons += [
                (f, round(sub.gate_weight * c, 4)) for f, c in self._contributions(sub.x)[:1]
            ]
            reasons += mix[:2]
        else:
            reasons += mix
        shown = sub.log_pred if math.isnan(sub.shown_log) else sub.shown_log
        return DurationPrediction.from_log(
            shown, log_std, reasons=tuple(reasons), expected_s=sub.expected_s
        )

    def learn(self, job: JobEvent, duration_s: float) -> None:
        lg = math.log1p(max(0.0, duration_s))
        sub = self._pending.pop(self.hist.job_key(job), None)
        if sub is None:  # never predicted (e.g. submitted before a restart)
            sub = self._submit(job)
        if self.use_learner:
            self._learn_correction(sub.x, lg - sub.base)
            self.gate.learn(sub.level, {"mix": sub.base, "learner": sub.base + sub.correction}, lg)
        self.hedge.learn(sub.level, sub.experts, lg)
        # the plain mix learns from every job (it reads only its own estimates), the
        # limit's mixes from the jobs that had the limit's estimate
        self.mean_mix.learn(sub.mean_ctx, sub.mean_x, max(0.0, duration_s))
        if "limit" in sub.mean_x:
            self.mean_mix_limit.learn(sub.mean_ctx, sub.mean_x, max(0.0, duration_s))
        if not math.isnan(sub.limit_log):
            self.hedge_limit.learn(sub.level, {**sub.experts, "limit": sub.limit_log}, lg)
        self.hist.update(job, lg, abs(lg - sub.log_pred))
        self.limits.learn(job, duration_s)


class LinearDurationModel(KeyedDurationModel):
    """Online linear regression of the residual on the features.

    Reasons are the largest ``weight * value`` terms.
    """

    name = "river_linear"
    version = "5"

    def __init__(
        self,
        lr: float = 0.01,
        l2: float = 0.0,
        scale: bool = False,
        optimizer: str = "sgd",
        loss: str = "huber",
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.scaler = preprocessing.StandardScaler() if scale else None
        opt = optim.AdaGrad(lr) if optimizer == "adagrad" else optim.SGD(lr)
        lo: optim.losses.RegressionLoss = optim.losses.Huber(1.0)
        if loss == "absolute":
            lo = optim.losses.Absolute()
        elif loss == "squared":
            lo = optim.losses.Squared()
        self.reg = linear_model.LinearRegression(optimizer=opt, loss=lo, l2=l2, intercept_lr=lr)

    def _x(self, x: dict[str, float]) -> dict[str, float]:
        return self.scaler.transform_one(x) if self.scaler is not None else x

    def _correct(self, x: dict[str, float]) -> float:
        return float(self.reg.predict_one(self._x(x)))

    def _learn_correction(self, x: dict[str, float], target: float) -> None:
        if self.scaler is not None:
            self.scaler.learn_one(x)
        self.reg.learn_one(self._x(x), target)

    def _contributions(self, x: dict[str, float]) -> list[tuple[str, float]]:
        xs = self._x(x)
        w = self.reg.weights
        terms = [(f, w.get(f, 0.0) * v) for f, v in xs.items()]
        return heapq.nlargest(2, terms, key=lambda t: abs(t[1]))


class TreeDurationModel(KeyedDurationModel):
    """Hoeffding tree regressor of the residual (adaptive leaves: mean or linear)."""

    name = "river_tree"
    version = "5"

    def __init__(
        self, grace_period: int = 100, max_depth: int = 10, leaf: str = "mean", **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.reg = tree.HoeffdingTreeRegressor(
            grace_period=grace_period, max_depth=max_depth, leaf_prediction=leaf
        )

    def _correct(self, x: dict[str, float]) -> float:
        return float(self.reg.predict_one(x))

    def _learn_correction(self, x: dict[str, float], target: float) -> None:
        self.reg.learn_one(x, target)


class ForestDurationModel(KeyedDurationModel):
    """Adaptive random forest regressor of the residual (accurate, slow)."""

    name = "river_arf"
    version = "5"

    def __init__(
        self, n_models: int = 10, max_depth: int = 8, grace_period: int = 200, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.reg = forest.ARFRegressor(
            n_models=n_models, max_depth=max_depth, grace_period=grace_period, seed=42
        )

    def _correct(self, x: dict[str, float]) -> float:
        return float(self.reg.predict_one(x))

    def _learn_correction(self, x: dict[str, float], target: float) -> None:
        self.reg.learn_one(x, target)
