"""The expert mixes of the duration models: :class:`Hedge` (the point forecast's mix of
history statistics, and the learner's gate) and :class:`MeanMix` (the rank's mix of
mean estimates, River's ``EWARegressor`` with a fixed share)."""

from __future__ import annotations

import heapq
import math
from typing import Any

from river import base, ensemble, optim


class Hedge:
    """Exponentially weighted average of expert forecasts (absolute loss, discounted).

    One set of weights per context (here: the most specific history level a job has),
    so the mix learned for jobs with a user's history is not used for new users.

    The same exponential weights as River's ``EWARegressor`` with ``Absolute`` loss,
    kept apart because three differences matter: the expert set varies from job to job
    within a context (a level without history has no expert; a newcomer starts at the
    mean past loss), where ``EWARegressor`` has a fixed list; the cumulative losses are
    discounted (``discount``), which River's weights are not; and the state is the
    losses, not weights multiplied to 0.0 (an underflowed River weight never recovers).
    Measured without the discount (River's semantics), 2026-12-05: the rank of
    ``history_mix`` is unchanged (this mix feeds only its point forecast) and its
    ``mae_log`` 0.0002 / 0.027 / 0.00002 lower on Philly / ITP cluster02 / Venus.

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
