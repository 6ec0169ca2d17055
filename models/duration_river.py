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

from river import base, ensemble, forest, linear_model, optim, preprocessing, tree

from gpuhint.wire.contract import JobEvent
from models.base import DurationPrediction
from models.features import LEVELS, HistoryFeatures

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


class Hedge:
    """Exponentially weighted average of expert forecasts (absolute loss, discounted).

    One set of weights per context (here: the most specific history level a job has),
    so the mix learned for jobs with a user's history is not used for new users.

    >>> h = Hedge(eta=1.0)
    >>> for _ in range(50):
    ...     h.learn("c", {"good": 5.0, "bad": 9.0}, 5.0)
    >>> round(h.predict("c", {"good": 5.0, "bad": 9.0})[0], 2)
    5.0
    """

    def __init__(self, eta: float = 0.5, discount: float = 0.999) -> None:
        self.eta = eta
        self.discount = discount
        self.loss: dict[str, dict[str, float]] = {}

    def weights(self, ctx: str, names: list[str]) -> list[float]:
        loss = self.loss.get(ctx)
        if not loss:
            return [1.0 / len(names)] * len(names)
        get = loss.get
        ls = [get(n) for n in names]
        if None in ls:  # a newcomer starts as an average expert
            mean = sum(loss.values()) / len(loss)
            ls = [mean if v is None else v for v in ls]
        lo = min(ls)  # type: ignore[type-var]
        eta = self.eta
        exp = math.exp
        w = [exp(-eta * (v - lo)) for v in ls]  # type: ignore[operator]
        tot = sum(w)
        return [v / tot for v in w]

    def predict(
        self, ctx: str, experts: dict[str, float], top: int = 3
    ) -> tuple[float, tuple[tuple[str, float], ...]]:
        """Mixed forecast, and the ``top`` most weighted experts with ``weight * value``
        (their share of the forecast)."""
        names = list(experts)
        w = self.weights(ctx, names)
        prod = [wi * v for wi, v in zip(w, experts.values(), strict=True)]
        best = heapq.nlargest(top, range(len(names)), key=w.__getitem__)
        return sum(prod), tuple((names[i], prod[i]) for i in best)

    def learn(self, ctx: str, experts: dict[str, float], y: float) -> None:
        loss = self.loss.setdefault(ctx, {})
        d = self.discount
        mean = sum(loss.values()) / len(loss) if loss else 0.0
        for n, v in experts.items():
            loss[n] = d * loss.get(n, mean) + abs(v - y)


class GammaDeviance(optim.losses.RegressionLoss):
    """``y/p - log(y/p) - 1``: the Bregman loss of ``-log``, minimized in expectation by
    ``p = E[y]`` (it elicits the *mean*, what QSSF ranks by) and scale-free (a ratio), so
    heavy-tailed durations do not swamp it as squared seconds would. Durations below
    1 s count as 1 s; the loss is capped at ``cap`` so one job cannot zero every weight.

    >>> loss = GammaDeviance()
    >>> loss(100.0, 100.0), round(loss(200.0, 100.0), 4), loss(1e9, 1.0)
    (0.0, 0.3069, 10.0)
    """

    def __init__(self, cap: float = 10.0) -> None:
        self.cap = cap

    def __call__(self, y_true: Any, y_pred: Any) -> Any:
        r = max(1.0, float(y_true)) / max(1.0, float(y_pred))
        return min(self.cap, r - math.log(r) - 1.0)

    def gradient(self, y_true: Any, y_pred: Any) -> Any:
        p = max(1.0, float(y_pred))
        return (p - max(1.0, float(y_true))) / (p * p)


class _Expert(base.Regressor):
    """One candidate mean estimate, read from the feature dict (learns nothing itself)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def learn_one(self, x: dict[Any, Any], y: Any) -> None:
        return None

    def predict_one(self, x: dict[Any, Any]) -> float:
        return float(x[self.key])


BURST_KS = (0.25, 1.0, 4.0)
"""Prior weights (in jobs) of the mean estimates mixed for the rank: the burst
posterior ``(k * prior + evidence) / (k + finished)`` trusting the burst's own evidence
more (0.25), as before (1) or less (4); the mix learns which holds."""
MEAN_EXPERTS = tuple(f"k{k:g}" for k in BURST_KS)
"""Mean estimates (seconds) mixed for the rank; the River models add ``learner`` (the
``k1`` estimate times ``exp`` of their gated log correction)."""


SHARE = 0.01
"""Fixed share of the rank's mix: after each update every expert gets back this share
of the weight, spread evenly (Herbster & Warmuth, "Tracking the best expert", 1998), so
no expert's weight falls below ``SHARE / n`` and the mix can move to another expert
within about a hundred jobs. Plain multiplicative weights (River's ``EWARegressor``
alone) locked each context onto one extreme estimate (weight 1.000 on ``k0.25`` or
``k4``); measured in docs/qssf.md ("Fixed share"). Only for the mix of the burst
posteriors (``history_mix``): with a River learner's expert in the mix, a share (to
every expert, or to the posteriors only) put ``river_linear``'s Venus rank at 3.9x the
oracle, worse than FIFO, so the ``river_*`` models keep River's plain weights."""


class MeanMix:
    """The expected duration (what QSSF ranks by) as River's ``EWARegressor`` over mean
    estimates in seconds, one per context (the most specific level with history),
    weights learned online with the mean-eliciting :class:`GammaDeviance`, plus a
    fixed share (:data:`SHARE`) after each update.

    >>> mm = MeanMix(("cred", "vc"))
    >>> for _ in range(30):
    ...     mm.learn("c", {"cred": 100.0, "vc": 1000.0}, 100.0)
    >>> round(mm.predict("c", {"cred": 100.0, "vc": 1000.0})), min(mm.weights("c")) >= 0.005
    (109, True)
    """

    def __init__(
        self, experts: tuple[str, ...], learning_rate: float = 0.5, share: float = SHARE
    ) -> None:
        self.experts = experts
        self.learning_rate = learning_rate
        self.share = share
        self.loss = GammaDeviance()
        self.mix: dict[str, ensemble.EWARegressor] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "share" not in self.__dict__:  # version 4: history_mix's mix goes on with it
            self.share = 0.0 if "learner" in self.experts else SHARE

    def _get(self, ctx: str) -> ensemble.EWARegressor:
        m = self.mix.get(ctx)
        if m is None:
            m = ensemble.EWARegressor(
                [_Expert(k) for k in self.experts], loss=self.loss, learning_rate=self.learning_rate
            )
            m.weights = [1.0 / len(self.experts)] * len(self.experts)  # River starts at 1 each
            self.mix[ctx] = m
        return m

    def predict(self, ctx: str, x: dict[str, float]) -> float:
        """Pure: the mix of a context not seen yet is the plain average."""
        m = self.mix.get(ctx)
        if m is None:
            return sum(x[k] for k in self.experts) / len(self.experts)
        # EWARegressor.predict_one's own sum (same terms, same order: the same float),
        # without a method call per expert through the ensemble's UserList iterator
        return float(sum(x[k] * w for k, w in zip(self.experts, m.weights, strict=True)))

    def weights(self, ctx: str) -> list[float]:
        m = self.mix.get(ctx)
        return list(m.weights) if m is not None else [1.0 / len(self.experts)] * len(self.experts)

    def learn(self, ctx: str, x: dict[str, float], y: float) -> None:
        m = self._get(ctx)
        m.learn_one(x, y)
        a = self.share
        if a > 0.0:
            n = len(m.weights)
            m.weights = [(1.0 - a) * w + a / n for w in m.weights]


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
        # job key -> what was known at submit, for learning at finish
        self._pending: OrderedDict[str, _Submitted] = OrderedDict()

    # -- learner hooks ----------------------------------------------------------------
    def _correct(self, x: dict[str, float]) -> float:
        return 0.0

    def _learn_correction(self, x: dict[str, float], target: float) -> None:
        return None

    def _contributions(self, x: dict[str, float]) -> list[tuple[str, float]]:
        """Feature contributions to the correction (log units), largest first."""
        return []

    # -- DurationModel ----------------------------------------------------------------
    def _submit(self, job: JobEvent) -> _Submitted:
        # the context features feed only the learner: a model without one skips them
        x, experts, level, parts = self.hist.features_parts(job, context=self.use_learner)
        base, top = self.hedge.predict(level, experts)
        if self.use_learner:
            get = experts.get
            for name, feature in _DELTA_FEATURES:
                x[feature] = get(name, base) - base
        corr = 0.0
        gate_w = 0.0
        if self.use_learner:
            corr = max(-MAX_CORRECTION, min(MAX_CORRECTION, self._correct(x)))
            if not math.isfinite(corr):
                corr = 0.0
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
        return _Submitted(
            kept_x, experts, level, base, corr, gate_w, log_pred, top, expected, mean_x, level
        )

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
        return self._prediction(job, self._submit(job))

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
        est = min(MAX_EXPECTED_S, self.mean_mix.predict(level, mean_x))
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

    def related_keys(self, job: JobEvent) -> tuple[str, ...]:
        """History keys whose change moves this job's expected duration, most specific
        first (its burst, name template and user+GPUs): the index of waiting jobs."""
        return tuple(k for lv, k in self.hist.job_keys(job) if lv in _RELATED)

    def _prediction(self, job: JobEvent, sub: _Submitted) -> DurationPrediction:
        spread = self.hist.spread(job)
        log_std = spread * ABS_TO_STD if spread is not None else self.prior_log_std
        # contributions in log1p-seconds: the base, then what moved it
        reasons: list[tuple[str, float]] = [(f"history:{sub.level}", round(sub.base, 4))]
        mix = [(f"mix:{n}", round(c, 4)) for n, c in sub.top]
        if self.use_learner:
            reasons.append(("learner:correction", round(sub.gate_weight * sub.correction, 4)))
            reasons += [
                (f, round(sub.gate_weight * c, 4)) for f, c in self._contributions(sub.x)[:1]
            ]
            reasons += mix[:2]
        else:
            reasons += mix
        return DurationPrediction.from_log(
            sub.log_pred, log_std, reasons=tuple(reasons), expected_s=sub.expected_s
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
        self.mean_mix.learn(sub.mean_ctx, sub.mean_x, max(0.0, duration_s))
        self.hist.update(job, lg, abs(lg - sub.log_pred))


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
