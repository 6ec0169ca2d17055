"""Features of a job at submit time, from the job itself and the recent history of its keys.

:class:`HistoryFeatures` keeps, per key, a short window of the log durations of the
last finished jobs (plus an exponentially weighted mean, a count and the last value),
and per user the jobs submitted lately. It turns a submitted :class:`JobEvent` into a
flat ``dict[str, float]`` for a River learner, and a *base* estimate of
``log1p(duration)`` from the most specific key that has history (the paper's rule,
with medians of logs instead of means of seconds).

Key levels, most specific first (every key is prefixed with ``cluster|vc`` so that the
state of one VC lives with that VC's partition):

* ``name``      -- same user and same job-name template (digits stripped), when named
* ``user+gpus`` -- same user, same GPU count
* ``user``      -- same user
* ``gpus``      -- anyone in the VC with the same GPU count (what ITP-style traces have)
* ``vc``        -- anyone in the VC

:meth:`HistoryFeatures.expected_duration` estimates a job's *mean* duration in seconds
(what QSSF ranks by) by Bühlmann credibility down the nested chain
``vc -> user -> user+gpus -> name``: each level's mean duration is weighted against the
estimate of the level above by ``n / (n + k)``, with ``k`` = (variance of durations
within a key) / (variance of the true means between keys), estimated online per VC and
level from running sums. A new user's job gets the VC's mean; a user's many consistent
jobs get close to that user's own mean; few or wildly varying jobs are shrunk to the VC.

Memory is bounded: each key keeps at most ``window`` durations and at most ``max_keys``
keys are kept (least recently used are dropped); pending jobs are capped likewise.
Everything is picklable.

>>> from gpuhint.contract import JobEvent
>>> hf = HistoryFeatures()
>>> job = JobEvent(phase="submitted", job_id="1", user="u", num_gpus=2, time=0, submit_time=0)
>>> hf.update(job, math.log1p(99.0))
>>> x, experts, level = hf.features(job)
>>> level, round(math.expm1(experts["user+gpus:med"]))
('user+gpus', 99)
>>> x["user+gpus:n"] == math.log1p(1)
True
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from typing import Any

from gpuhint.contract import JobEvent

LEVELS = ("name", "user+gpus", "user", "gpus", "vc")
"""Key levels, most specific first."""

_DIGITS = re.compile(r"\d+")
_DAY = 86400.0
_WEEK = 7 * _DAY
_TWO_PI = 2.0 * math.pi


def name_template(name: str | None) -> str | None:
    """A job name with runs of digits replaced, so that ``run_12``, ``run_13`` match.

    >>> name_template("resnet50_lr0.1_seed3")
    'resnet#_lr#.#_seed#'
    """
    if not name:
        return None
    t = _DIGITS.sub("#", name.strip().lower())
    return t[:128] or None


CRED_LEVELS = ("user", "user+gpus", "name")
"""Levels of the credibility chain for the expected duration, below the VC, general
first; each is nested in the one before (a name template is kept per user)."""

EXPERT_STATS = ("med", "fast", "slow", "amean")
"""Per-level estimates of log1p(duration): window median, fast and slow EWMs of logs,
and log1p of the all-time mean duration (the paper's rule)."""


class KeyStats:
    """Rolling statistics of log durations for one key (picklable, bounded)."""

    __slots__ = (
        "abs_res",
        "agg",
        "count",
        "ewm",
        "ewm_slow",
        "last",
        "n_res",
        "recent",
        "std",
        "sum_dur",
        "sum_sq",
        "values",
        "win_sq",
        "win_sum",
    )

    def __init__(self, window: int) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.ewm = 0.0  # fast EWM (recent jobs)
        self.ewm_slow = 0.0  # slow EWM (long memory, O(1) state)
        self.count = 0
        self.sum_dur = 0.0  # seconds: the paper's estimator is the mean duration
        self.sum_sq = 0.0  # seconds squared (credibility: spread within the key)
        self.agg: str | None = None  # its credibility sums' ``cluster|vc|level``, if any
        self.last = 0.0
        self.abs_res = 0.0  # EWM of |log error| of the model's predictions for this key
        self.n_res = 0
        # cached on each add (predictions read them far more often than jobs finish)
        self.values: tuple[float, ...] = ()  # one per EXPERT_STATS
        self.std = 0.0  # standard deviation of the window
        self.win_sum = 0.0
        self.win_sq = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    @property
    def mean_s(self) -> float:
        """All-time mean duration in seconds (0 before any job)."""
        return self.sum_dur / self.count if self.count else 0.0

    def add(self, lg: float, alpha: float, alpha_slow: float) -> None:
        r = self.recent
        if r.maxlen is not None and len(r) == r.maxlen:
            old = r[0]
            self.win_sum -= old
            self.win_sq -= old * old
        r.append(lg)
        self.win_sum += lg
        self.win_sq += lg * lg
        if self.count == 0:
            self.ewm = self.ewm_slow = lg
        else:
            self.ewm += alpha * (lg - self.ewm)
            # early on, a running mean; later an EWM with memory ~1/alpha_slow
            self.ewm_slow += max(alpha_slow, 1.0 / (self.count + 1)) * (lg - self.ewm_slow)
        self.count += 1
        d = math.expm1(lg)
        self.sum_dur += d
        self.sum_sq += d * d
        self.last = lg
        n = self.count
        self.values = (
            self.median(),
            self.ewm,
            self.ewm_slow,
            math.log1p(self.sum_dur / n),
        )
        k = len(r)
        var = (self.win_sq - self.win_sum * self.win_sum / k) / (k - 1) if k > 1 else 0.0
        self.std = math.sqrt(max(0.0, var))

    def add_residual(self, abs_err: float, alpha: float) -> None:
        self.abs_res = (
            abs_err if self.n_res == 0 else self.abs_res + alpha * (abs_err - self.abs_res)
        )
        self.n_res += 1

    def median(self) -> float:
        xs = sorted(self.recent)
        n = len(xs)
        mid = n // 2
        return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


class HistoryFeatures:
    """Per-key rolling history and per-user recent submissions; job -> feature dict."""

    def __init__(
        self,
        window: int = 32,
        ewm_alpha: float = 0.3,
        slow_alpha: float = 0.01,
        residual_alpha: float = 0.1,
        max_keys: int = 200_000,
        max_pending: int = 200_000,
        prior_log: float = math.log1p(3600.0),
        recent_s: float = 3600.0,
    ) -> None:
        self.window = window
        self.ewm_alpha = ewm_alpha
        self.slow_alpha = slow_alpha
        self.residual_alpha = residual_alpha
        self.max_keys = max_keys
        self.max_pending = max_pending
        self.prior_log = prior_log
        self.recent_s = recent_s
        self.stats: OrderedDict[str, KeyStats] = OrderedDict()
        self.global_stats = KeyStats(window)
        # queue state: per submitter key, recent submit times; pending job -> its keys
        self.submits: OrderedDict[str, deque[float]] = OrderedDict()
        self.inflight: dict[str, int] = {}
        self.pending: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # credibility sums per ``cluster|vc|level``: [N jobs, S sum, Q sum of squares,
        # K keys, A = sum over keys of sum^2/n, B = sum over keys of n^2, cached k or -1]
        self.cred: dict[str, list[float]] = {}

    # -- keys -------------------------------------------------------------------------
    @staticmethod
    def keys(job: JobEvent) -> list[tuple[str, str]]:
        """``(level, key)`` pairs for a job, most specific first; absent levels skipped."""
        p = f"{job.cluster}|{job.vc}|"
        out: list[tuple[str, str]] = []
        if job.user:
            tmpl = name_template(job.name)
            if tmpl:
                out.append(("name", f"{p}n|{job.user}|{tmpl}"))
            out.append(("user+gpus", f"{p}ug|{job.user}|{job.num_gpus}"))
            out.append(("user", f"{p}u|{job.user}"))
        else:
            tmpl = name_template(job.name)
            if tmpl:
                out.append(("name", f"{p}n||{tmpl}"))
        out.append(("gpus", f"{p}g|{job.num_gpus}"))
        out.append(("vc", f"{p}all"))
        return out

    @staticmethod
    def _submitters(job: JobEvent) -> tuple[str, ...]:
        p = f"{job.cluster}|{job.vc}|"
        return (f"{p}su|{job.user}", f"{p}sall") if job.user else (f"{p}sall",)

    @staticmethod
    def job_key(job: JobEvent) -> str:
        return f"{job.cluster}|{job.job_id}"

    def _get(self, key: str) -> KeyStats | None:
        s = self.stats.get(key)
        if s is not None:
            self.stats.move_to_end(key)
        return s

    # -- features ---------------------------------------------------------------------
    def features(self, job: JobEvent) -> tuple[dict[str, float], dict[str, float], str]:
        """``(context, experts, level)``: :meth:`features_expected` without the last."""
        x, experts, level, _ = self.features_expected(job)
        return x, experts, level

    def features_expected(
        self, job: JobEvent
    ) -> tuple[dict[str, float], dict[str, float], str, float]:
        """``(context, experts, level, expected)`` for a job about to be submitted.

        ``context``: numeric features (size, time, queue state, history counts and
        spreads). ``experts``: candidate estimates of ``log1p(duration)``, per level
        (``level:med`` window median, ``level:fast`` / ``level:slow`` EWMs,
        ``amean`` log of the all-time mean duration), for every level with history and
        for ``global`` (the prior before any job); a level without history has no
        experts and ``level:n`` = 0. ``level``: the most specific level with history.
        ``expected``: :meth:`expected_duration` (seconds). Pure with respect to the
        state: calling it twice gives the same answer.
        """
        x: dict[str, float] = {}
        g = job.num_gpus
        x["log_gpus"] = math.log1p(g)
        x["log_cpus"] = math.log1p(job.num_cpus) if job.num_cpus is not None else 0.0
        x["has_cpus"] = 1.0 if job.num_cpus is not None else 0.0
        nodes = job.num_nodes if job.num_nodes else max(1, math.ceil(g / 8))
        x["log_nodes"] = math.log1p(nodes)
        x["gpus_per_node"] = g / nodes / 8.0
        t = job.submit_time
        x["hour_sin"] = math.sin(_TWO_PI * (t % _DAY) / _DAY)
        x["hour_cos"] = math.cos(_TWO_PI * (t % _DAY) / _DAY)
        x["week_sin"] = math.sin(_TWO_PI * (t % _WEEK) / _WEEK)
        x["week_cos"] = math.cos(_TWO_PI * (t % _WEEK) / _WEEK)

        found: dict[str, KeyStats] = {}
        level = "global" if self.global_stats.count else "prior"
        for lv, key in reversed(self.keys(job)):
            s = self._get(key)
            if s is not None and s.count > 0:
                found[lv] = s
                level = lv
        experts: dict[str, float] = {}
        gs = self.global_stats
        if gs.count:
            fill, fill_std = gs.values, gs.std
        else:
            fill = (self.prior_log,) * len(EXPERT_STATS)
            fill_std = 0.0
        for st, v in zip(EXPERT_STATS, fill, strict=True):
            experts[f"global:{st}"] = v
        for lv in reversed(LEVELS):
            s = found.get(lv)
            if s is not None:
                fill_std = s.std
                x[f"{lv}:n"] = math.log1p(s.count)
                for st, v in zip(EXPERT_STATS, s.values, strict=True):
                    experts[f"{lv}:{st}"] = v
            else:
                x[f"{lv}:n"] = 0.0
        x["hist_std"] = fill_std  # spread of the most specific level's window

        # queue state: recent submissions and jobs in flight, per user and per VC
        known = self.job_key(job) in self.pending
        if not job.user:
            x["user:submits_1h"] = 0.0
            x["user:inflight"] = 0.0
        for tag, skey in zip(
            ("user", "vc") if job.user else ("vc",), self._submitters(job), strict=True
        ):
            times = self.submits.get(skey)
            recent = 0
            if times:
                lo = t - self.recent_s
                for s_t in reversed(times):
                    if s_t < lo:
                        break
                    if s_t < t:
                        recent += 1
            x[f"{tag}:submits_1h"] = math.log1p(recent)
            x[f"{tag}:inflight"] = math.log1p(max(0, self.inflight.get(skey, 0) - known))
        return x, experts, level, self._expected(job, found)

    def credibility_k(self, vc_level: str) -> float:
        """Bühlmann's ``k`` (within-key variance / between-key variance of means) for a
        ``cluster|vc|level``; ``inf`` (no credibility) until it can be estimated."""
        a = self.cred.get(vc_level)
        if a is None:
            return math.inf
        if a[6] >= 0.0:  # cached since the last update
            return a[6]
        n, s, q, k, sa, b, _ = a
        out = math.inf
        if k >= 2 and n - k >= 1:
            epv = max(0.0, (q - sa) / (n - k))
            vhm = (sa - s * s / n - (k - 1) * epv) / (n - b / n)
            if vhm > 0:
                out = epv / vhm
        a[6] = out
        return out

    def expected_duration(self, job: JobEvent) -> float:
        """Credibility estimate of the job's mean duration in seconds (module docstring).

        Pure with respect to the state.
        """
        found: dict[str, KeyStats] = {}
        for lv, key in self.keys(job):
            s = self.stats.get(key)
            if s is not None and s.count > 0:
                found[lv] = s
        return self._expected(job, found)

    def _expected(self, job: JobEvent, found: dict[str, KeyStats]) -> float:
        vc = found.get("vc")
        if vc is not None:
            est = vc.mean_s
        elif self.global_stats.count:
            est = self.global_stats.mean_s
        else:
            est = math.expm1(self.prior_log)
        p = f"{job.cluster}|{job.vc}|"
        for lv in CRED_LEVELS:
            s = found.get(lv)
            if s is None:
                continue
            k = self.credibility_k(p + lv)
            if math.isfinite(k):
                z = s.count / (s.count + k)
                est = z * s.mean_s + (1.0 - z) * est
        return est

    def _cred_add(self, agg: str, s: KeyStats, sign: float) -> None:
        """Add (``sign`` 1) or remove (-1) a whole key's sums."""
        a = self.cred.get(agg)
        if a is None:
            a = self.cred[agg] = [0.0] * 6 + [-1.0]
        n = s.count
        a[0] += sign * n
        a[1] += sign * s.sum_dur
        a[2] += sign * s.sum_sq
        a[3] += sign
        a[4] += sign * s.sum_dur * s.sum_dur / n
        a[5] += sign * n * n
        a[6] = -1.0

    def _cred_job(self, agg: str, s: KeyStats, d: float) -> None:
        """Account one more job of ``d`` seconds in key ``s`` (already added to ``s``)."""
        a = self.cred.get(agg)
        if a is None:
            a = self.cred[agg] = [0.0] * 6 + [-1.0]
        n = s.count
        old = s.sum_dur - d
        a[0] += 1.0
        a[1] += d
        a[2] += d * d
        if n == 1:
            a[3] += 1.0
            a[4] += d * d
        else:
            a[4] += s.sum_dur * s.sum_dur / n - old * old / (n - 1)
        a[5] += 2 * n - 1
        a[6] = -1.0

    def spread(self, job: JobEvent, min_count: int = 3) -> float | None:
        """EWM of the absolute log error of past predictions at the most specific key."""
        for _, key in self.keys(job):
            s = self.stats.get(key)
            if s is not None and s.n_res >= min_count:
                return s.abs_res
        gs = self.global_stats
        return gs.abs_res if gs.n_res >= min_count else None

    # -- state updates ----------------------------------------------------------------
    def observe_submit(self, job: JobEvent) -> None:
        """Record a submission (idempotent per job id) for the queue-state features."""
        jk = self.job_key(job)
        if jk in self.pending:
            return
        subs = self._submitters(job)
        self.pending[jk] = subs
        for skey in subs:
            times = self.submits.get(skey)
            if times is None:
                times = self.submits[skey] = deque(maxlen=256)
            else:
                self.submits.move_to_end(skey)
            times.append(job.submit_time)
            self.inflight[skey] = self.inflight.get(skey, 0) + 1
        while len(self.pending) > self.max_pending:
            _, old = self.pending.popitem(last=False)
            self._release(old)
        while len(self.submits) > self.max_keys:
            skey, _ = self.submits.popitem(last=False)
            self.inflight.pop(skey, None)

    def _release(self, subs: tuple[str, ...]) -> None:
        for skey in subs:
            n = self.inflight.get(skey, 0) - 1
            if n > 0:
                self.inflight[skey] = n
            else:
                self.inflight.pop(skey, None)

    def update(self, job: JobEvent, log_duration: float, abs_error: float | None = None) -> None:
        """Learn a finished job's ``log1p(duration)`` (and the model's error on it)."""
        subs = self.pending.pop(self.job_key(job), None)
        if subs is not None:
            self._release(subs)
        a = self.ewm_alpha
        p = f"{job.cluster}|{job.vc}|"
        d = math.expm1(log_duration)
        for lv, key in self.keys(job):
            s = self.stats.get(key)
            if s is None:
                s = self.stats[key] = KeyStats(self.window)
            else:
                self.stats.move_to_end(key)
            s.add(log_duration, a, self.slow_alpha)
            if lv in CRED_LEVELS:
                if s.agg is None:
                    s.agg = p + lv
                self._cred_job(s.agg, s, d)
            if abs_error is not None:
                s.add_residual(abs_error, self.residual_alpha)
        self.global_stats.add(log_duration, a, self.slow_alpha)
        if abs_error is not None:
            self.global_stats.add_residual(abs_error, self.residual_alpha)
        while len(self.stats) > self.max_keys:
            _, old = self.stats.popitem(last=False)
            if old.agg is not None and old.count:
                self._cred_add(old.agg, old, -1.0)
