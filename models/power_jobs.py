"""gpuhint's job-aware power policy, the decision part (pure; docs/ces.md).

One core, two drivers: the simulator's :class:`models.simulator.power_policies.JobAware`
(offline, ``gpuhint evaluate ces --trace``) and the worker's job-aware CES engine
(:mod:`gpuhint.cores.ces_jobs`, online). Each feeds it the arrivals (submit time, GPUs),
the nodes becoming idle or allocated, and at every decision a :class:`JobView` of the
cluster (idle nodes longest idle first, booting nodes, the head of the queue, the GPUs
of running jobs *predicted* to end soon); it answers with a :class:`PowerChoice` (wake
N nodes, or power these idle nodes down). What a decision sees is all it depends on, so
the two drivers decide alike on the same events (``tests/cores/test_ces_jobs.py``).

>>> from models.simulator.power import PowerModel
>>> core = JobAwareCore(JobAwareConfig(warmup_s=0, quantile=0.0), PowerModel(), 8, t0=0.0)
>>> class View:
...     idle = {0: 0.0, 1: 0.0}
...     n_boot = 0
...     def head_gpus(self): return None
...     def freeing_gpus(self, until): return 0
>>> core.decide(4000.0, View())
PowerChoice(wake=0, down=[0, 1])
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from models.packed import pack_columns, unpack_columns
from models.simulator.power import PowerModel

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class JobAwareConfig:
    """Knobs of :class:`JobAware`; ``quantile`` is the one to turn (docs/ces.md)."""

    quantile: float = 0.98
    tick_s: float = 60.0
    history_s: float = 7 * DAY_S
    warmup_s: float = 3600.0
    max_cycles_per_day: int = 6
    min_idle_s: float = 0.0
    memory_s: float = DAY_S
    min_samples: int = 360
    conditional: bool = True
    wait_price_w: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.quantile <= 1:
            raise ValueError("quantile must be in [0, 1]")
        if self.tick_s <= 0 or self.history_s <= 0 or self.warmup_s < 0 or self.min_idle_s < 0:
            raise ValueError("tick, history > 0; warm-up, min idle >= 0")
        if self.max_cycles_per_day < 1:
            raise ValueError("max_cycles_per_day must be >= 1")
        if self.memory_s <= 0 or self.min_samples < 1:
            raise ValueError("memory_s > 0 and min_samples >= 1")
        if self.wait_price_w is not None and not self.wait_price_w >= 0:
            raise ValueError("wait_price_w must be >= 0")


@dataclass
class PowerChoice:
    """One decision: wake ``wake`` off nodes, or power down the idle nodes ``down``."""

    wake: int = 0
    down: list[int] = field(default_factory=list)


class JobView(Protocol):
    """What a decision reads from the cluster (the simulator, or the worker's belief)."""

    @property
    def idle(self) -> dict[int, float]:
        """Idle nodes (on, no job) -> since when, longest idle first."""
        ...

    @property
    def n_boot(self) -> int:
        """Nodes booting (woken, or allocated while off)."""
        ...

    def head_gpus(self) -> int | None:
        """GPUs of the job at the head of the queue (None: empty queue)."""
        ...

    def freeing_gpus(self, until: float) -> int:
        """GPUs of running jobs predicted to end by ``until`` (overdue ones included)."""
        ...


class JobAwareCore:
    """Keep a reserve of idle nodes sized for the arrivals of one boot time; off the rest.

    At every decision it computes

    * the *reserve*: the ``quantile`` of the nodes that arrivals asked for in a window of
      one boot time + one tick (GPUs / GPUs per node, summed, rounded up), over the ticks
      of the last ``history_s`` that were in the same *state* as now -- the state being
      the largest such demand of the last ``memory_s`` (log2 buckets: a cluster that saw
      16-node bursts today keeps room for one, a quiet one does not); all nodes stay on
      for ``warmup_s`` while it learns;
    * the *head's need*: the nodes of the job at the head of the queue;
    * the *timeout*: the idle age before a node may go down, the one (among bin edges of
      1 min .. 24 h) that would have cost least over the idle periods of the last
      ``history_s`` (idle energy, or off energy + a boot + ``wait_price_w`` x boot time;
      ``None``: the busy draw, a waiting job priced as a busy node) -- nodes freed by
      short jobs that are resubmitted minutes later stay up;

    then, with *soon* the nodes' worth (GPUs // GPUs per node) of running jobs
    *predicted* (gpuhint's duration model, never the true duration) to end within a boot
    time, counted only while a job waits at the head, it wakes
    need + reserve - (idle + booting + soon) nodes when that is positive. The nodes those
    jobs free can serve the head or the arrivals alike, so *soon* counts against the
    head's need and the reserve together, not against the head's need alone: a reserve
    that the freed nodes cover is not woken for either (and the head's off nodes are
    woken a boot time ahead of the predicted ends that do not cover it). Otherwise it
    powers down the excess idle nodes (idle + booting beyond need + reserve; *soon* not
    counted) older than the timeout, longest idle first, skipping any node that reached
    ``max_cycles_per_day`` power-downs in the last 24 h. Nodes allocated to a job
    (booting for it, or the head's) are never idle, so never among them.

    >>> from models.simulator.power import PowerModel
    >>> core = JobAwareCore(JobAwareConfig(warmup_s=0), PowerModel(), 8, t0=0.0)
    >>> class View:  # a 1-node head; 2 nodes' worth of jobs end within a boot
    ...     idle, n_boot = {}, 0
    ...     def head_gpus(self): return 8
    ...     def freeing_gpus(self, until): return 16
    >>> core.reserve = lambda: 3  # 1 + 3 wanted; 0 idle + 0 booting + 2 soon: wake 2
    >>> core.decide(100.0, View()).wake
    2
    """

    def __init__(self, cfg: JobAwareConfig, pm: PowerModel, gpus_per_node: int, t0: float) -> None:
        self.cfg, self.pm, self.g = cfg, pm, gpus_per_node
        self.t0 = t0
        self.window_s = pm.boot_s + cfg.tick_s
        self.arrivals: deque[tuple[float, float]] = deque()  # (submit, nodes asked)
        self.in_window = 0.0
        self.hist = _History(cfg.history_s)
        self.states: deque[tuple[float, int | None]] = deque()
        self.peak: deque[tuple[float, int]] = deque()  # sliding max of demand, memory_s
        self.state: int | None = None
        self.idle_start: dict[int, float] = {}
        self.gaps = _Gaps(cfg.history_s)
        self.tau = 0.0
        self.timeout_at = -math.inf
        self.next_t = t0
        self.downs: dict[int, deque[float]] = {}

    # -- what the driver reports -------------------------------------------------
    def arrive(self, submit: float, gpus: int) -> None:
        """A job was submitted (in submit order)."""
        self.arrivals.append((submit, gpus / self.g))
        self.in_window += gpus / self.g

    def on_idle(self, node: int, t: float) -> None:
        self.idle_start.setdefault(node, t)

    def on_alloc(self, node: int, t: float) -> None:
        since = self.idle_start.pop(node, None)
        if since is not None:
            self.gaps.add(t, t - since)

    def undo_down(self, node: int) -> None:
        """A power-down that did not happen (the node stayed on): forget its cycle."""
        d = self.downs.get(node)
        if d:
            d.pop()

    def renumber(self, new: dict[int, int]) -> None:
        """The driver renumbered its nodes (old -> new); nodes not in ``new`` are gone."""
        self.idle_start = {new[i]: t for i, t in self.idle_start.items() if i in new}
        self.downs = {new[i]: d for i, d in self.downs.items() if i in new}

    # -- deciding --------------------------------------------------------------------
    def timeout(self, t: float) -> float:
        """The power-down age that minimizes energy + ``wait_price_w`` x boot waits over
        the idle periods of the last ``history_s`` (recomputed hourly)."""
        if t >= self.timeout_at:
            pm = self.pm
            price = pm.busy_w if self.cfg.wait_price_w is None else self.cfg.wait_price_w
            self.tau = self.gaps.best_timeout(pm, price)
            self.timeout_at = t + 3600.0
        return self.tau

    def observe(self, t: float) -> None:
        """Arrivals before ``t - window`` out of the window; one sample per tick."""
        while self.arrivals and self.arrivals[0][0] <= t - self.window_s:
            self.in_window -= self.arrivals.popleft()[1]
        if t < self.next_t:
            return
        self.next_t = t + self.cfg.tick_s
        x = math.ceil(self.in_window - 1e-9)
        self.hist.add(t, x, None)
        # the state a window ago is paired with the demand of the window since then
        states = self.states
        while states and states[0][0] <= t - self.window_s:
            _, st = states.popleft()
            if st is not None:
                self.hist.add(t, x, st)
        peak = self.peak
        while peak and peak[-1][1] <= x:
            peak.pop()
        peak.append((t, x))
        while peak[0][0] <= t - self.cfg.memory_s:
            peak.popleft()
        self.state = _bucket(peak[0][1])
        states.append((t, self.state))

    def reserve(self) -> int:
        q = self.cfg.quantile
        r = None
        if self.cfg.conditional:
            r = self.hist.quantile(self.state, q, self.cfg.min_samples)
        if r is None:
            r = self.hist.quantile(None, q, 1)
        return int(r or 0)

    def decide(self, t: float, view: JobView) -> PowerChoice:
        """The decision at ``t`` (after every arrival up to ``t`` was reported)."""
        self.observe(t)
        if t - self.t0 < self.cfg.warmup_s:
            return PowerChoice()
        g = self.g
        hg = view.head_gpus()
        head_nodes = math.ceil(hg / g) if hg is not None else 0
        want = head_nodes + self.reserve()
        idle = view.idle
        have = len(idle) + view.n_boot
        soon = view.freeing_gpus(t + self.pm.boot_s) // g if head_nodes else 0
        if want > have + soon:
            return PowerChoice(wake=want - have - soon)
        excess = have - want
        if excess <= 0 or not idle:
            return PowerChoice()
        return PowerChoice(down=self._downs(t, idle, excess))

    def _downs(self, t: float, idle: dict[int, float], excess: int) -> list[int]:
        tau = self.timeout(t)
        out: list[int] = []
        for node, since in idle.items():
            if excess <= 0:
                break
            if t - since < max(self.cfg.min_idle_s, tau):
                break  # the rest became idle later still
            d = self.downs.setdefault(node, deque())
            while d and d[0] <= t - DAY_S:
                d.popleft()
            if len(d) >= self.cfg.max_cycles_per_day:
                continue
            d.append(t)
            out.append(node)
            excess -= 1
        return out


def _bucket(x: int) -> int:
    """0 for no demand, else 1 + floor(log2(nodes)): 1, 2-3, 4-7, 8-15, ..."""
    return 0 if x <= 0 else x.bit_length()


class _History:
    """Demand samples per state (None: all), each kept ``keep_s`` seconds, sorted."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.times: dict[int | None, deque[tuple[float, int]]] = {}
        self.sorted: dict[int | None, list[int]] = {}

    def add(self, t: float, x: int, state: int | None) -> None:
        times = self.times.setdefault(state, deque())
        srt = self.sorted.setdefault(state, [])
        times.append((t, x))
        bisect.insort(srt, x)
        while times[0][0] <= t - self.keep_s:
            _, old = times.popleft()
            del srt[bisect.bisect_left(srt, old)]

    def __getstate__(self) -> dict[str, object]:
        """Packed columns (models.packed): ~100x smaller than the tuples; the sorted
        lists are rebuilt on load."""
        states = list(self.times)
        cols = [tuple(zip(*self.times[s], strict=True)) or ((), ()) for s in states]
        times, xs = [c[0] for c in cols], [c[1] for c in cols]
        return {"keep_s": self.keep_s, "states": states, "packed": pack_columns(times, xs)}

    def __setstate__(self, st: dict[str, object]) -> None:
        if "packed" not in st:  # a checkpoint of before 2026-12-07: the tuples themselves
            self.__dict__.update(st)
            return
        self.keep_s = st["keep_s"]  # type: ignore[assignment]
        times, xs = unpack_columns(st["packed"])  # type: ignore[arg-type]
        states: list[int | None] = st["states"]  # type: ignore[assignment]
        self.times = {
            s: deque(zip(t, x, strict=True)) for s, t, x in zip(states, times, xs, strict=True)
        }
        self.sorted = {s: sorted(x) for s, x in zip(states, xs, strict=True)}

    def quantile(self, state: int | None, q: float, min_n: int) -> int | None:
        srt = self.sorted.get(state)
        if not srt or len(srt) < min_n:
            return None
        return srt[max(0, min(len(srt) - 1, math.ceil(q * len(srt)) - 1))]


#: Idle-period bins (s); their edges are the candidate timeouts.
GAP_EDGES: tuple[float, ...] = (
    0,
    60,
    120,
    300,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
    5400,
    7200,
    10800,
    14400,
    21600,
    28800,
    43200,
    64800,
    86400,
    math.inf,
)


class _Gaps:
    """Lengths of recent idle periods (idle to next allocation), binned, kept ``keep_s``."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.items: deque[tuple[float, int, float]] = deque()
        nb = len(GAP_EDGES) - 1
        self.count = [0] * nb
        self.total = [0.0] * nb

    def add(self, t: float, gap: float) -> None:
        b = bisect.bisect_right(GAP_EDGES, gap) - 1
        self.items.append((t, b, gap))
        self.count[b] += 1
        self.total[b] += gap
        while self.items[0][0] <= t - self.keep_s:
            _, ob, og = self.items.popleft()
            self.count[ob] -= 1
            self.total[ob] -= og

    def __getstate__(self) -> dict[str, object]:
        """The idle periods as packed columns (models.packed); the bins' running sums as
        they are (recomputing them could differ in the last bit)."""
        ts, bins, gaps = tuple(zip(*self.items, strict=True)) or ((), (), ())
        packed = pack_columns([ts, gaps], [bins])
        return {"keep_s": self.keep_s, "count": self.count, "total": self.total, "packed": packed}

    def __setstate__(self, st: dict[str, object]) -> None:
        if "packed" in st:
            (ts, gaps), (bins,) = unpack_columns(st.pop("packed"))  # type: ignore[arg-type]
            st["items"] = deque(zip(ts, bins, gaps, strict=True))
        self.__dict__.update(st)

    def best_timeout(self, pm: PowerModel, wait_price_w: float) -> float:
        """Timeout (a bin edge) of least energy + wait cost over the idle periods seen:
        a period longer than the timeout pays a boot and ``wait_price_w`` x boot time."""
        best, best_cost = math.inf, math.inf
        wake = pm.boot_s * (pm.boot_w + wait_price_w)
        for k, tau in enumerate(GAP_EDGES[:-1]):
            cost = 0.0
            for b, (c, s) in enumerate(zip(self.count, self.total, strict=True)):
                if b < k:
                    cost += pm.idle_w * s
                else:
                    cost += c * (pm.idle_w * tau + wake) + pm.off_w * (s - tau * c)
            if cost < best_cost - 1e-9:
                best, best_cost = tau, cost
        return best
