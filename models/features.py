"""Features of a job at submit time, from the job itself and the recent history of its keys.

:class:`HistoryFeatures` keeps, per key, a short window of the log durations of the
last finished jobs (plus an exponentially weighted mean, a count and the last value),
and per user the jobs submitted lately. It turns a submitted :class:`JobEvent` into a
flat ``dict[str, float]`` for a River learner, and a *base* estimate of
``log1p(duration)`` from the most specific key that has history (the paper's rule,
with medians of logs instead of means of seconds).

Key levels, most specific first (every key is prefixed with ``cluster|vc`` so that the
state of one VC lives with that VC's partition):

* ``burst``     -- a pseudo-user: jobs of one shape (user if known, GPUs, name template if
  known) submitted with gaps of at most ``burst_gap_s`` between consecutive ones (a
  sweep, a job array), grouped online at submit (:class:`BurstTracker`). On traces
  without users this is the only level that tells one sweep from another
* ``name``      -- same user and same job-name template (digits stripped), when named
* ``user+gpus`` -- same user, same GPU count
* ``user``      -- same user
* ``gpus``      -- anyone in the VC with the same GPU count (what ITP-style traces have)
* ``vc``        -- anyone in the VC

:meth:`HistoryFeatures.expected_duration` estimates a job's *mean* duration in seconds
(what QSSF ranks by) by Bühlmann credibility down the nested chain
``vc -> user -> user+gpus -> name -> burst``: each level's mean duration is weighted against the
estimate of the level above by ``n / (n + k)``, with ``k`` = (variance of durations
within a key) / (variance of the true means between keys), estimated online per VC and
level from running sums. A new user's job gets the VC's mean; a user's many consistent
jobs get close to that user's own mean; few or wildly varying jobs are shrunk to the VC.

Memory is bounded: each key keeps at most ``window`` durations and at most ``max_keys``
keys are kept (least recently used are dropped); pending jobs are capped likewise.
Everything is picklable.

>>> from gpuhint.wire.contract import JobEvent
>>> hf = HistoryFeatures()
>>> job = JobEvent(phase="submitted", job_id="1", user="u", num_gpus=2, time=0, submit_time=0)
>>> hf.update(job, math.log1p(99.0))
>>> later = job.model_copy(update={"job_id": "2", "time": 86400.0, "submit_time": 86400.0})
>>> x, experts, level = hf.features(later)  # a day later: a new burst of the same user
>>> level, round(math.expm1(experts["user+gpus:med"]))
('user+gpus', 99)
>>> hf.features(job)[2]  # the same burst
'burst'

>>> x["user+gpus:n"] == math.log1p(1)
True
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from typing import Any

from gpuhint.wire.contract import JobEvent
from models.credibility import cred_add, cred_job, credibility_k

# ``KeyStats`` and ``_keystats`` stay importable from here: VC state and checkpoints
# pickled before the move name ``models.features._keystats`` / ``models.features.KeyStats``
from models.keystats import BURST_GAP_S, BurstTracker, KeyStats, name_template
from models.keystats import _keystats as _keystats

LEVELS = ("burst", "name", "user+gpus", "user", "gpus", "vc")
"""Key levels, most specific first."""

_DAY = 86400.0
_WEEK = 7 * _DAY
_TWO_PI = 2.0 * math.pi


CRED_LEVELS = ("user", "user+gpus", "name", "burst")
"""Levels of the credibility chain for the expected duration, below the VC, general
first; each is nested in the one before (a name template is kept per user)."""

EXPERT_STATS = ("med", "fast", "slow", "amean")
"""Per-level estimates of log1p(duration): window median, fast and slow EWMs of logs,
and log1p of the all-time mean duration (the paper's rule)."""


_EXPERT_NAMES = {lv: tuple(f"{lv}:{st}" for st in EXPERT_STATS) for lv in (*LEVELS, "global")}
"""Expert names per level (built once, not per job)."""
_COUNT_NAMES = {lv: f"{lv}:n" for lv in LEVELS}


BURST_K = 1.0
"""Weight of the prior (in jobs) against a burst's own evidence (docs/qssf.md)."""


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
        burst_gap_s: float | None = None,
        burst_k: float | None = None,
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
        # credibility sums per ``cluster|vc|level`` (models/credibility.py)
        self.cred: dict[str, list[float]] = {}
        self.bursts = BurstTracker(BURST_GAP_S if burst_gap_s is None else burst_gap_s, max_keys)
        self.burst_of: dict[str, str] = {}  # pending job key -> its burst key
        # pending job key -> (its submitted event, burst, keys): the key walk of a
        # waiting job is done once, not at each re-rank. A cache only: not pickled, and
        # used only for that very event object (a later event of the job, or one after
        # a restore, walks its keys as before)
        self._keys: dict[str, tuple[JobEvent, str, list[tuple[str, str]]]] = {}
        self.burst_k = BURST_K if burst_k is None else burst_k
        # running jobs per burst: [count, sum of start times]; job key -> (burst, start)
        self.running: dict[str, list[float]] = {}
        self.run_of: dict[str, tuple[str, float]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_keys", None)  # a cache (of event objects): rebuilt as jobs come
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._keys = {}

    # -- keys -------------------------------------------------------------------------
    def burst(self, job: JobEvent) -> str:
        """The job's burst key: the one given at its submit, else what it would get now."""
        jk = self.job_key(job)
        c = self._keys.get(jk)
        if c is not None and c[0] is job:
            return c[1]
        b = self.burst_of.get(jk)
        return b if b is not None else self.bursts.peek(job)

    def job_keys(self, job: JobEvent) -> list[tuple[str, str]]:
        """:meth:`keys` with the job's burst (cached for a submitted event while it waits:
        the same list each time, not to be modified)."""
        c = self._keys.get(self.job_key(job))
        if c is not None and c[0] is job:
            return c[2]
        return self.keys(job, self.burst(job))

    @staticmethod
    def keys(job: JobEvent, burst: str | None = None) -> list[tuple[str, str]]:
        """``(level, key)`` pairs for a job, most specific first; absent levels skipped."""
        p = f"{job.cluster}|{job.vc}|"
        out: list[tuple[str, str]] = []
        if burst is not None:
            out.append(("burst", burst))
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
        """``(context, experts, level)``: :meth:`features_parts` without the last."""
        x, experts, level, _ = self.features_parts(job)
        return x, experts, level

    def features_parts(
        self, job: JobEvent, context: bool = True, touch: bool = True
    ) -> tuple[dict[str, float], dict[str, float], str, tuple[str, float, float, float]]:
        """``(context, experts, level, parts)`` for a job about to be submitted.

        ``context``: numeric features (size, time, queue state, history counts and
        spreads). ``experts``: candidate estimates of ``log1p(duration)``, per level
        (``level:med`` window median, ``level:fast`` / ``level:slow`` EWMs,
        ``amean`` log of the all-time mean duration), for every level with history and
        for ``global`` (the prior before any job); a level without history has no
        experts and ``level:n`` = 0. ``level``: the most specific level with history.
        ``parts``: :meth:`expected_parts` at submit time, from the same key lookups.
        Pure with respect to the state: calling it twice gives the same answer.
        ``context=False`` leaves ``context`` empty (a model without a learner reads only
        the experts, the level and the parts). ``touch=False`` leaves the keys' LRU
        order as it was (a pure prediction must not change which keys are evicted).
        """
        x: dict[str, float] = {}
        if context:
            self._job_context(job, x)
        found: dict[str, KeyStats] = {}
        level = "global" if self.global_stats.count else "prior"
        get = self._get if touch else self.stats.get
        for lv, key in reversed(self.job_keys(job)):
            s = get(key)
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
        for name, v in zip(_EXPERT_NAMES["global"], fill, strict=True):
            experts[name] = v
        for lv in reversed(LEVELS):
            s = found.get(lv)
            if s is not None:
                fill_std = s.std
                if context:
                    x[_COUNT_NAMES[lv]] = math.log1p(s.count)
                for name, v in zip(_EXPERT_NAMES[lv], s.values, strict=True):
                    experts[name] = v
            elif context:
                x[_COUNT_NAMES[lv]] = 0.0
        if context:
            x["hist_std"] = fill_std  # spread of the most specific level's window
            self._queue_context(job, x)
        return x, experts, level, self._parts(job, found, level, job.submit_time)

    def _job_context(self, job: JobEvent, x: dict[str, float]) -> None:
        """Size, time of day and week, and time-limit features of a job."""
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
        lim = job.time_limit_s
        x["log_time_limit"] = math.log1p(lim) if lim is not None else 0.0
        x["has_time_limit"] = 1.0 if lim is not None else 0.0

    def _queue_context(self, job: JobEvent, x: dict[str, float]) -> None:
        """Queue state: recent submissions and jobs in flight, per user and per VC."""
        t = job.submit_time
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

    def credibility_k(self, vc_level: str) -> float:
        """Bühlmann's ``k`` for a ``cluster|vc|level`` (:func:`credibility_k`)."""
        return credibility_k(self.cred, vc_level)

    def expected_duration(self, job: JobEvent, now: float | None = None) -> float:
        """Credibility estimate of the job's mean duration in seconds (module docstring),
        with the burst's running siblings' time so far counted up to ``now`` (default:
        the job's submit time). Pure with respect to the state.
        """
        found: dict[str, KeyStats] = {}
        for lv, key in self.job_keys(job):
            s = self.stats.get(key)
            if s is not None and s.count > 0:
                found[lv] = s
        return self._expected(job, found, job.submit_time if now is None else now)

    def expected_parts(
        self, job: JobEvent, now: float | None = None
    ) -> tuple[str, float, float, float]:
        """``(level, prior, evidence_s, finished)``: the most specific level with
        history, the credibility estimate above the burst (seconds), and the burst's
        evidence (its finished siblings' durations plus its running siblings' time so
        far, up to ``now``) over its ``finished`` siblings, so that a learned mix can
        weigh the burst's own evidence against the prior
        (``(k * prior + evidence_s) / (k + finished)`` for any ``k``). Pure."""
        found: dict[str, KeyStats] = {}
        level = "global" if self.global_stats.count else "prior"
        for lv, key in self.job_keys(job):
            s = self.stats.get(key)
            if s is not None and s.count > 0:
                if not found:
                    level = lv
                found[lv] = s
        return self._parts(job, found, level, job.submit_time if now is None else now)

    def _parts(
        self, job: JobEvent, found: dict[str, KeyStats], level: str, now: float
    ) -> tuple[str, float, float, float]:
        total, n = self._burst_evidence(job, found.get("burst"), now)
        return level, self._chain(job, found), total, n

    def _burst_evidence(self, job: JobEvent, s: KeyStats | None, now: float) -> tuple[float, float]:
        run = self.running.get(self.burst(job))
        exposure = 0.0
        if run is not None and run[0] > 0:
            exposure = max(0.0, run[0] * now - run[1])
        n = s.count if s is not None else 0
        return (s.sum_dur if s is not None else 0.0) + exposure, float(n)

    def _expected(self, job: JobEvent, found: dict[str, KeyStats], now: float) -> float:
        est = self._burst_posterior(job, found.get("burst"), self._chain(job, found), now)
        lim = job.time_limit_s
        if lim is not None and lim > 0:  # a job cannot outrun its time limit
            est = min(est, lim)
        return est

    def _chain(self, job: JobEvent, found: dict[str, KeyStats]) -> float:
        """The credibility estimate down ``vc -> user -> user+gpus -> name``."""
        vc = found.get("vc")
        if vc is not None:
            est = vc.mean_s
        elif self.global_stats.count:
            est = self.global_stats.mean_s
        else:
            est = math.expm1(self.prior_log)
        p = f"{job.cluster}|{job.vc}|"
        for lv in CRED_LEVELS[:-1]:
            s = found.get(lv)
            if s is None:
                continue
            k = self.credibility_k(p + lv)
            if math.isfinite(k):
                z = s.count / (s.count + k)
                est = z * s.mean_s + (1.0 - z) * est
        return est

    def _burst_posterior(
        self, job: JobEvent, s: KeyStats | None, prior: float, now: float
    ) -> float:
        """Posterior mean duration of the job's burst: ``prior`` worth ``burst_k`` jobs,
        plus the burst's finished siblings and the time its running siblings have run so
        far (an exposure without a finish: evidence that they are long), as the
        exponential-gamma posterior ``(k * prior + sum of time) / (k + finished)``."""
        total, n = self._burst_evidence(job, s, now)
        if n == 0 and total == 0.0:
            return prior
        k = self.burst_k
        return (k * prior + total) / (k + n)

    def observe_start(self, job: JobEvent) -> None:
        """A job started: its running time counts as evidence for its burst until it ends."""
        jk = self.job_key(job)
        if jk in self.run_of:
            return
        b = self.burst(job)
        start = job.start_time if job.start_time is not None else job.time
        self.run_of[jk] = (b, start)
        r = self.running.get(b)
        if r is None:
            r = self.running[b] = [0.0, 0.0]
        r[0] += 1
        r[1] += start
        # bounded like the pending jobs: a job cancelled while running is never learned
        while len(self.run_of) > self.max_pending:
            self._end_run(next(iter(self.run_of)))

    def _end_run(self, jk: str) -> None:
        got = self.run_of.pop(jk, None)
        if got is None:
            return
        b, start = got
        r = self.running.get(b)
        if r is not None:
            r[0] -= 1
            r[1] -= start
            if r[0] <= 0:
                del self.running[b]

    def spread(self, job: JobEvent, min_count: int = 3) -> float | None:
        """EWM of the absolute log error of past predictions at the most specific key."""
        for _, key in self.job_keys(job):
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
        b = self.burst_of[jk] = self.bursts.assign(job)
        self._keys[jk] = (job, b, self.keys(job, b))
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
            old_jk, old = self.pending.popitem(last=False)
            self.burst_of.pop(old_jk, None)
            self._keys.pop(old_jk, None)
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

    def forget(self, job: JobEvent) -> None:
        """A job ended (or was cancelled): it no longer waits or runs. What :meth:`update`
        does first; alone, for a job that ends without a duration (nothing to learn),
        whose running time would otherwise count as its burst's evidence for ever."""
        jk = self.job_key(job)
        self._end_run(jk)
        self.burst_of.pop(jk, None)
        self._keys.pop(jk, None)
        subs = self.pending.pop(jk, None)
        if subs is not None:
            self._release(subs)

    def update(self, job: JobEvent, log_duration: float, abs_error: float | None = None) -> None:
        """Learn a finished job's ``log1p(duration)`` (and the model's error on it)."""
        jk = self.job_key(job)
        if jk not in self.burst_of:  # never seen at submit (e.g. before a restart)
            self.burst_of[jk] = self.bursts.assign(job)
        keys = self.job_keys(job)
        self.forget(job)
        a = self.ewm_alpha
        p = f"{job.cluster}|{job.vc}|"
        d = math.expm1(log_duration)
        for lv, key in keys:
            s = self.stats.get(key)
            if s is None:
                s = self.stats[key] = KeyStats(self.window)
            else:
                self.stats.move_to_end(key)
            s.add(log_duration, a, self.slow_alpha)
            if lv in CRED_LEVELS:
                if s.agg is None:
                    s.agg = p + lv
                cred_job(self.cred, s.agg, s, d)
            if abs_error is not None:
                s.add_residual(abs_error, self.residual_alpha)
        self.global_stats.add(log_duration, a, self.slow_alpha)
        if abs_error is not None:
            self.global_stats.add_residual(abs_error, self.residual_alpha)
        while len(self.stats) > self.max_keys:
            _, old = self.stats.popitem(last=False)
            if old.agg is not None and old.count:
                cred_add(self.cred, old.agg, old, -1.0)
