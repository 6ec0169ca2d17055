"""Per-key statistics of finished jobs' log durations, and the online grouping of
submits into bursts: the state :class:`models.features.HistoryFeatures` keeps per key.

:class:`KeyStats` keeps its own five running statistics (window median, fast and slow
EWMs, all-time mean and sum of squares, window spread) in one flat, compactly pickled
object rather than River's ``stats`` objects: see its docstring for why.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from typing import Any

from gpuhint.wire.contract import JobEvent

_DIGITS = re.compile(r"\d+")


def name_template(name: str | None) -> str | None:
    """A job name with runs of digits replaced, so that ``run_12``, ``run_13`` match.

    >>> name_template("resnet50_lr0.1_seed3")
    'resnet#_lr#.#_seed#'
    """
    if not name:
        return None
    t = _DIGITS.sub("#", name.strip().lower())
    return t[:128] or None


BURST_GAP_S = 900.0
"""Default gap between consecutive submits of one shape that still continues a burst;
chosen on the shared traces (docs/qssf.md, "Bursts")."""


class BurstTracker:
    """Online grouping of submits into bursts (pseudo-users), bounded and picklable.

    A job's *shape* is ``cluster|vc``, user (if any), GPU count and name template (if
    any). A submit continues the shape's current burst when it comes at most ``gap_s``
    after the shape's previous submit, else it opens a new one.

    >>> from gpuhint.wire.contract import JobEvent
    >>> bt = BurstTracker(gap_s=60)
    >>> def job(i, t):
    ...     return JobEvent(phase="submitted", job_id=str(i), num_gpus=1, time=t, submit_time=t)
    >>> [bt.assign(job(i, t)) for i, t in enumerate([0, 30, 80, 500])]
    ['default|default|b||1|#1', 'default|default|b||1|#1', 'default|default|b||1|#1', \
'default|default|b||1|#2']
    """

    def __init__(self, gap_s: float | None = None, max_shapes: int = 200_000) -> None:
        self.gap_s = BURST_GAP_S if gap_s is None else gap_s
        self.max_shapes = max_shapes
        # shape -> [burst number, last submit time]
        self.shapes: OrderedDict[str, list[float]] = OrderedDict()

    @staticmethod
    def shape(job: JobEvent) -> str:
        tmpl = name_template(job.name) or ""
        return f"{job.cluster}|{job.vc}|b|{job.user or ''}|{job.num_gpus}|{tmpl}"

    def peek(self, job: JobEvent) -> str:
        """The burst key :meth:`assign` would give (no state change)."""
        sh = self.shape(job)
        st = self.shapes.get(sh)
        if st is None:
            return f"{sh}#1"
        seq = int(st[0]) if job.submit_time - st[1] <= self.gap_s else int(st[0]) + 1
        return f"{sh}#{seq}"

    def assign(self, job: JobEvent) -> str:
        """Record a submit; return its burst key."""
        sh = self.shape(job)
        st = self.shapes.get(sh)
        t = job.submit_time
        if st is None:
            st = self.shapes[sh] = [1.0, t]
        else:
            self.shapes.move_to_end(sh)
            if t - st[1] > self.gap_s:
                st[0] += 1
            st[1] = max(st[1], t)
        while len(self.shapes) > self.max_shapes:
            self.shapes.popitem(last=False)
        return f"{sh}#{int(st[0])}"


class KeyStats:
    """Rolling statistics of log durations for one key (picklable, bounded).

    Not River's ``stats`` objects, on purpose (measured 2026-12-05, river 0.26.1):
    ``stats.RollingQuantile(0.5, window)`` gives the same median but pickles alone to
    ~800 bytes against ~420 for this whole object, and VC state holds hundreds of these,
    pickled at every save; ``stats.EWMean`` computes ``a*x + (1-a)*m`` (a last-bit
    difference, up to 4e-15, from ``m + a*(x-m)`` here); the slow EWM's warm-up
    (a running mean until ``1/(n+1)`` falls below its alpha) has no River twin.
    """

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

    def __reduce__(self) -> tuple[Any, ...]:
        # a flat tuple, and no derived fields (``values``, ``std``: recomputed on load
        # by the same arithmetic): VC state is pickled on every save, ~300 of these each
        r = self.recent
        return (
            _keystats,
            (
                tuple(r),
                r.maxlen,
                self.ewm,
                self.ewm_slow,
                self.count,
                self.sum_dur,
                self.sum_sq,
                self.agg,
                self.last,
                self.abs_res,
                self.n_res,
                self.win_sum,
                self.win_sq,
            ),
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Pickles of before :meth:`__reduce__` (a dict of every slot)."""
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
        self._derive()

    def _derive(self) -> None:
        """The cached ``values`` and ``std`` from the state (after each add, on load)."""
        n = self.count
        if n == 0:
            self.values, self.std = (), 0.0
            return
        self.values = (
            self.median(),
            self.ewm,
            self.ewm_slow,
            math.log1p(self.sum_dur / n),
        )
        r = self.recent
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


def _keystats(
    recent: tuple[float, ...],
    window: int | None,
    ewm: float,
    ewm_slow: float,
    count: int,
    sum_dur: float,
    sum_sq: float,
    agg: str | None,
    last: float,
    abs_res: float,
    n_res: int,
    win_sum: float,
    win_sq: float,
) -> KeyStats:
    """Rebuild a :class:`KeyStats` from :meth:`KeyStats.__reduce__`'s tuple."""
    s = KeyStats.__new__(KeyStats)
    s.recent = deque(recent, maxlen=window)
    s.ewm, s.ewm_slow, s.count, s.sum_dur, s.sum_sq = ewm, ewm_slow, count, sum_dur, sum_sq
    s.agg, s.last, s.abs_res, s.n_res = agg, last, abs_res, n_res
    s.win_sum, s.win_sq = win_sum, win_sq
    s._derive()
    return s
