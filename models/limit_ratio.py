"""How much of its time limit a job uses, learned per limit and user: an estimate from it.

Where users request time limits (Slurm's ``--time``), the limit says something about
the job that its history may not: a user who asks for 1 hour for one script and 3 days
for another. The limit itself is a poor estimate (users ask for far more than their
jobs use, in round values, often the partition's maximum or default; Tsafrir, Etsion
& Feitelson, JSSPP 2005), but the share of a given limit that a user's jobs use is
steady enough to learn. :class:`LimitRatios` keeps exponentially weighted means of
``duration / limit`` and of its log along a chain of keys, each nested in the one
before: the VC (``cluster|vc``), the VC's jobs that asked for this very limit, and the
user's jobs that asked for it. A job's share is the VC's, moved towards each more
specific key's by ``n / (n + k)`` (``n`` that key's jobs seen; in logs, so that a key
whose share is far below the VC's is not dragged up to it); its estimate is its limit
times that share. Keyed by the limit's value, because the
share depends on it: jobs that asked for a 7-day maximum use a far smaller part of it
than jobs whose users asked for 2 hours. No limit, or no job with a limit seen in the
VC yet: no estimate. Nor where the job's user (the VC, on traces without users) has
only ever asked for one limit: a site default or a script's habit says nothing that
the user's history does not, and an estimate from it would only add the noise of a
coarse recent mean to the rank (measured: docs/qssf.md, "Synthetic limits"). Pure and
picklable; bounded (least recently used keys dropped).

>>> from gpuhint.wire.contract import JobEvent
>>> r = LimitRatios()
>>> job = JobEvent(phase="submitted", job_id="1", user="u", num_gpus=1, time=0,
...                submit_time=0, time_limit_s=3600.0)
>>> r.estimate(job) is None
True
>>> for _ in range(20):
...     r.learn(job, 900.0)
>>> r.estimate(job) is None  # the user always asked for one limit: it tells nothing
True
>>> r.learn(job.model_copy(update={"job_id": "2", "time_limit_s": 600.0}), 500.0)
>>> [round(x) for x in r.estimate(job)]  # (mean, median-like) in seconds
[905, 903]
"""

from __future__ import annotations

import math
from collections import OrderedDict

from gpuhint.wire.contract import JobEvent

ALPHA = 0.1
"""Weight of the newest job in the running means (about the last 10 jobs count)."""
SHRINK_K = 4.0
"""Prior weight (in jobs) of the VC's ratio against the user's own."""


class LimitRatios:
    """Per-user and per-VC running means of ``duration / limit`` (module docstring)."""

    def __init__(self, alpha: float = ALPHA, k: float = SHRINK_K, max_keys: int = 200_000) -> None:
        if not 0 < alpha <= 1 or k < 0 or max_keys < 2:
            raise ValueError("need 0 < alpha <= 1, k >= 0, max_keys >= 2")
        self.alpha, self.k, self.max_keys = alpha, k, max_keys
        # key -> [jobs seen, EWM of ratio, EWM of log ratio] (EWMs: a plain mean over
        # the first 1 / alpha jobs)
        self.stats: OrderedDict[str, list[float]] = OrderedDict()
        # user (or VC) -> [first limit asked for (whole seconds), 1 once another was]
        self.habits: OrderedDict[str, list[float]] = OrderedDict()

    @staticmethod
    def _keys(job: JobEvent, limit: float) -> tuple[str, ...]:
        """The chain of keys, general first: VC, VC and limit, user and limit."""
        vc = _vc_key(job)
        lim = f"{round(limit)}"
        if job.user:
            return vc, f"{vc}|l|{lim}", f"{vc}|ul|{_escaped(job.user)}|{lim}"
        return vc, f"{vc}|l|{lim}"

    @staticmethod
    def _habit_key(job: JobEvent) -> str:
        """Whose habits tell whether a limit says anything: the user's, else the VC's."""
        vc = _vc_key(job)
        return f"{vc}|h|{_escaped(job.user)}" if job.user else f"{vc}|h"

    def varied(self, job: JobEvent) -> bool:
        """Whether the job's user (the VC, without users) has asked for more than one
        limit: where all their jobs ask for one (a site default, a script's habit), the
        limit tells nothing the user's history does not. Pure."""
        h = self.habits.get(self._habit_key(job))
        return h is not None and h[1] > 0.0

    def estimate(self, job: JobEvent) -> tuple[float, float] | None:
        """``(mean, typical)`` duration in seconds from the job's limit, or None (no
        limit; the user never asked for another limit; nothing seen in the VC). Pure."""
        lim = job.time_limit_s
        if lim is None or not lim > 0 or not self.varied(job):
            return None
        vc_key, *specific = self._keys(job, lim)
        vc = self.stats.get(vc_key)
        if vc is None:
            return None
        # shrunk in logs: a key whose share is 100x below the VC's is not dragged up to it
        log_mean, log_typical = math.log(vc[1]), vc[2]
        for key in specific:
            s = self.stats.get(key)
            if s is not None:
                w = s[0] / (s[0] + self.k) if s[0] + self.k > 0 else 1.0
                log_mean += w * (math.log(s[1]) - log_mean)
                log_typical += w * (s[2] - log_typical)
        return lim * math.exp(log_mean), lim * math.exp(log_typical)

    def learn(self, job: JobEvent, duration_s: float) -> None:
        """A job with a limit finished after ``duration_s``: update its user and VC."""
        lim = job.time_limit_s
        if lim is None or not lim > 0:
            return
        r = min(1.0, max(1.0 / lim, max(0.0, duration_s) / lim))  # at least 1 s of it
        lr = math.log(r)
        for key in self._keys(job, lim):
            self._update(key, r, lr)
        self._note_habit(job, lim)

    def _note_habit(self, job: JobEvent, lim: float) -> None:
        """Keep [first limit asked for, 1 once another one was], in whole seconds as
        the keys of the shares."""
        key, whole = self._habit_key(job), float(round(lim))
        h = self.habits.get(key)
        if h is None:
            self.habits[key] = [whole, 0.0]
            while len(self.habits) > self.max_keys:
                self.habits.popitem(last=False)
        else:
            self.habits.move_to_end(key)
            if h[0] != whole:
                h[1] = 1.0

    def _update(self, key: str, r: float, lr: float) -> None:
        s = self.stats.get(key)
        if s is None:
            self.stats[key] = [1.0, r, lr]
            while len(self.stats) > self.max_keys:
                self.stats.popitem(last=False)
            return
        self.stats.move_to_end(key)
        s[0] += 1.0
        a = max(self.alpha, 1.0 / s[0])  # a plain mean over the first jobs
        s[1] += a * (r - s[1])
        s[2] += a * (lr - s[2])


def _escaped(name: str) -> str:
    r"""A name as one part of a key: ``|`` (the separator) and ``\`` escaped, so that a VC
    named ``v|l|3600`` is not VC ``v``'s limit 3600; names without them are unchanged
    (the keys of older pickles still match).

    >>> _escaped("v|l|3600"), _escaped("alice")
    ('v\\|l\\|3600', 'alice')
    """
    if "|" not in name and "\\" not in name:  # the common case, without copies
        return name
    return name.replace("\\", "\\\\").replace("|", "\\|")


def _vc_key(job: JobEvent) -> str:
    return f"{_escaped(job.cluster)}|{_escaped(job.vc)}"
