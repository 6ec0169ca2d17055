"""Power policies for :mod:`models.simulator.power` (pure).

* :class:`IdleTimer` -- Slurm's power saving: a node idle for ``SuspendTime`` powers down;
  it comes back only when a job needs it (the simulator's demand wake).
* :class:`SlotRule` -- the slot-based CES rule of ``models.power_policy`` (the artifact's
  rule, or gpuhint's forecast policy for load series) on the peak busy nodes per slot:
  it powers down idle nodes (longest idle first) or wakes off ones to its level.
* :class:`JobAware` -- gpuhint's policy from what the hint service knows (the queue, the
  running jobs' *predicted* remaining time, the arrivals so far); see its docstring.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass

from models.forecast import Forecaster
from models.power_policy import PowerPolicy as SlotPolicy
from models.power_policy import PowerPolicyConfig
from models.simulator.power import PowerModel, PowerSim

DAY_S = 86400.0


class IdleTimer:
    """Slurm's ``SuspendTime``: power a node down once it has been idle ``suspend_s``."""

    def __init__(self, suspend_s: float) -> None:
        if suspend_s < 0:
            raise ValueError("suspend_s must be >= 0")
        self.suspend_s = suspend_s
        self.due: list[tuple[float, int, float]] = []  # (when, node, idle since)

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim

    def on_idle(self, node: int, t: float) -> None:
        heapq.heappush(self.due, (t + self.suspend_s, node, t))

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        idle = self.sim.idle
        while self.due and self.due[0][0] <= t:
            _, node, since = heapq.heappop(self.due)
            if idle.get(node) == since:
                self.sim.power_down(node)

    def next_time(self) -> float:
        return self.due[0][0] if self.due else math.inf


class SlotRule:
    """A :class:`models.power_policy.PowerPolicy` driven once per slot by the peak busy nodes."""

    def __init__(self, cfg: PowerPolicyConfig, forecaster: Forecaster) -> None:
        self.cfg, self.forecaster = cfg, forecaster
        self.slot = 0
        self.next_t = math.inf

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim
        self.rule = SlotPolicy(self.cfg, total=sim.num_nodes)
        self.next_t = sim.t + self.cfg.slot_s

    def on_idle(self, node: int, t: float) -> None:
        return None

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        sim = self.sim
        if t < self.next_t:
            return
        self.next_t += self.cfg.slot_s
        used, total = sim.take_peak_busy(), sim.num_nodes
        on = total - sim.n_off
        self.rule.sync_active(on)
        fc = self.forecaster.update(self.next_t - 2 * self.cfg.slot_s, used, total)
        target = self.rule.step(self.slot, used, total, fc).active
        self.slot += 1
        if target > on:
            sim.wake(target - on)
        for node in list(sim.idle)[: max(0, on - target)]:
            sim.power_down(node)

    def next_time(self) -> float:
        return self.next_t


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


class JobAware:
    """Keep a reserve of idle nodes sized for the arrivals of one boot time; off the rest.

    At every job event and every ``tick_s`` it computes

    * the *reserve*: the ``quantile`` of the nodes that arrivals asked for in a window of
      one boot time + one tick (GPUs / GPUs per node, summed, rounded up), over the ticks
      of the last ``history_s`` that were in the same *state* as now -- the state being
      the largest such demand of the last ``memory_s`` (log2 buckets: a cluster that saw
      16-node bursts today keeps room for one, a quiet one does not); all nodes stay on
      for ``warmup_s`` while it learns;
    * the *head's need*: the nodes of the job at the head of the queue when it does not
      fit even with every node on, less the GPUs of running jobs *predicted* (gpuhint's
      duration model, never the true duration) to end within a boot time: its off nodes
      are woken a boot time ahead of the predicted ends, not after them;
    * the *timeout*: the idle age before a node may go down, the one (among bin edges of
      1 min .. 24 h) that would have cost least over the idle periods of the last
      ``history_s`` (idle energy, or off energy + a boot + ``wait_price_w`` x boot time;
      ``None``: the busy draw, a waiting job priced as a busy node) -- nodes freed by
      short jobs that are resubmitted minutes later stay up;

    then wakes nodes when idle + booting < need + reserve, and otherwise powers down the
    excess idle nodes older than the timeout, longest idle first, skipping any node that
    reached ``max_cycles_per_day`` power-downs in the last 24 h. Nodes allocated to a job
    (booting for it, or the head's) are never idle, so never among them.
    """

    def __init__(self, cfg: JobAwareConfig | None = None) -> None:
        self.cfg = cfg or JobAwareConfig()
        self.arrivals: deque[tuple[float, float]] = deque()  # (submit, nodes asked)
        self.in_window = 0.0
        self.hist = _History(self.cfg.history_s)
        self.states: deque[tuple[float, int | None]] = deque()
        self.peak: deque[tuple[float, int]] = deque()  # sliding max of demand, memory_s
        self.state: int | None = None
        self.idle_start: dict[int, float] = {}
        self.gaps = _Gaps(self.cfg.history_s)
        self.tau = 0.0
        self.timeout_at = -math.inf
        self.seen = 0
        self.next_t = math.inf

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim
        self.t0 = sim.t
        self.window_s = sim.pm.boot_s + self.cfg.tick_s
        self.next_t = sim.t
        self.downs: list[deque[float]] = [deque() for _ in range(sim.num_nodes)]
        self.order = sorted(range(len(sim.jobs)), key=lambda i: (sim.jobs[i].submit, i))

    def on_idle(self, node: int, t: float) -> None:
        self.idle_start.setdefault(node, t)

    def on_alloc(self, node: int, t: float) -> None:
        since = self.idle_start.pop(node, None)
        if since is not None:
            self.gaps.add(t, t - since)

    def timeout(self, t: float) -> float:
        """The power-down age that minimizes energy + ``wait_price_w`` x boot waits over
        the idle periods of the last ``history_s`` (recomputed hourly)."""
        if t >= self.timeout_at:
            pm = self.sim.pm
            price = pm.busy_w if self.cfg.wait_price_w is None else self.cfg.wait_price_w
            self.tau = self.gaps.best_timeout(pm, price)
            self.timeout_at = t + 3600.0
        return self.tau

    def _observe(self, t: float) -> None:
        """Arrivals up to ``t`` into the window; one sample per tick into the history."""
        jobs, g = self.sim.jobs, self.sim.gpus_per_node
        while self.seen < len(self.order) and jobs[self.order[self.seen]].submit <= t:
            j = jobs[self.order[self.seen]]
            self.arrivals.append((j.submit, j.gpus / g))
            self.in_window += j.gpus / g
            self.seen += 1
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

    def step(self, t: float) -> None:
        sim = self.sim
        self._observe(t)
        if t - self.t0 < self.cfg.warmup_s:
            return
        h = sim.head()
        g = sim.gpus_per_node
        head_nodes = math.ceil(sim.jobs[h].gpus / g) if h is not None else 0
        want = head_nodes + self.reserve()
        have = sim.n_idle + sim.n_boot
        soon = sim.freeing_gpus(t + sim.pm.boot_s) // g if head_nodes else 0
        if want > have + soon:
            sim.wake(want - have - soon)
            return
        excess = have - want
        if excess <= 0 or not sim.n_idle:
            return
        tau = self.timeout(t)
        for node, since in list(sim.idle.items()):
            if excess <= 0:
                break
            if t - since < max(self.cfg.min_idle_s, tau):
                break  # the rest became idle later still
            d = self.downs[node]
            while d and d[0] <= t - DAY_S:
                d.popleft()
            if len(d) >= self.cfg.max_cycles_per_day:
                continue
            d.append(t)
            sim.power_down(node)
            excess -= 1

    def next_time(self) -> float:
        return self.next_t


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
