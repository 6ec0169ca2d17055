"""Power saving on a node-count series (no jobs): Slurm's idle timer and gpuhint's reserve
policy, minute by minute (pure).

Nodes are exchangeable. Each step: nodes that finished booting become idle; if more nodes
are used than are busy, idle nodes are taken (the most recently idle first), then off
nodes are woken for the rest (up ``boot_s`` later; until then the missing nodes are
*shortfall*, node-minutes of demand above the booted nodes); if fewer are used, the
freed nodes go idle. The node count follows the series' total: nodes that join come on
idle, nodes that leave go off the books (off ones first, then idle, then booting). Then
the policy acts:

* ``IdleTimer`` (``suspend_s``): a node idle for ``suspend_s`` powers off;
* ``reserve`` (gpuhint, :class:`CountReserve`): the job-free counterpart of
  :class:`models.simulator.power_policies.JobAware` -- a reserve of idle nodes at the
  ``quantile`` of the rise in used nodes over one boot time + one step (conditioned on the
  largest such rise of the last day), woken ahead; excess idle nodes older than the learned
  timeout power off. No queue and no durations here: a series has neither.

>>> r = simulate_counts([0, 4, 4, 0, 0, 0, 0, 4], [4] * 8, 60, CountTimer(120))
>>> r.shortfall_node_min, r.power_downs
(4.0, 4)
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from models.simulator.power import PowerModel
from models.simulator.power_policies import DAY_S, _bucket, _Gaps, _History


@dataclass
class CountResult:
    """Totals over the measured steps ``[lo, hi)``."""

    off_node_min: float = 0.0
    shortfall_node_min: float = 0.0
    power_downs: int = 0
    boot_node_min: float = 0.0
    """Node-minutes booting (drawing ``PowerModel.boot_w`` where all-on would idle)."""


class CountState:
    """Idle nodes (idle-since times, oldest first), booting (ready times), off (since)."""

    def __init__(self, total: int, t0: float, boot_s: float) -> None:
        self.busy = 0
        self.idle: list[float] = [t0] * total
        self.boots: list[float] = []
        self.off: list[float] = []  # idle-since of the off nodes, oldest first
        self.boot_s = boot_s
        self.downs = 0

    def power_down(self, k: int) -> None:
        """The ``k`` longest-idle nodes go off."""
        self.off.extend(self.idle[:k])
        self.off.sort()
        del self.idle[:k]
        self.downs += k

    @property
    def nodes(self) -> int:
        return self.busy + len(self.idle) + len(self.boots) + len(self.off)

    def remove(self, k: int) -> None:
        """``k`` nodes left the cluster: off ones first (longest off), then idle (longest
        idle), then booting (the last to be ready); busy ones never (used <= total)."""
        for pool in (self.off, self.idle):
            take = min(k, len(pool))
            del pool[:take]
            k -= take
        take = min(k, len(self.boots))
        if take:
            self.boots = sorted(self.boots)[: len(self.boots) - take]
            heapq.heapify(self.boots)

    def wake(self, k: int, t: float) -> list[float]:
        """Boot up to ``k`` off nodes (the most recently used first); their idle-since."""
        k = min(k, len(self.off))
        woke = self.off[len(self.off) - k :]
        del self.off[len(self.off) - k :]
        for _ in woke:
            heapq.heappush(self.boots, t + self.boot_s)
        return woke


class CountPolicy(Protocol):
    def step(self, st: CountState, t: float, used: int, taken: list[float]) -> None:
        """Act at ``t``; ``taken``: idle-since of the nodes put to use this step."""
        ...


class CountTimer:
    """Slurm's ``SuspendTime`` on counts."""

    def __init__(self, suspend_s: float) -> None:
        self.suspend_s = suspend_s

    def step(self, st: CountState, t: float, used: int, taken: list[float]) -> None:
        k = 0
        while k < len(st.idle) and st.idle[k] <= t - self.suspend_s:
            k += 1
        if k:
            st.power_down(k)


class CountReserve:
    """gpuhint's reserve policy on counts (module docstring)."""

    def __init__(
        self,
        pm: PowerModel,
        step_s: float,
        quantile: float = 0.98,
        history_s: float = 7 * DAY_S,
        memory_s: float = DAY_S,
        min_samples: int = 360,
        warmup_s: float = 3600.0,
        wait_price_w: float | None = None,
    ) -> None:
        self.pm, self.q, self.min_samples = pm, quantile, min_samples
        self.window = max(1, math.ceil((pm.boot_s + step_s) / step_s))
        self.memory = max(1, round(memory_s / step_s))
        self.rises: deque[int] = deque()
        self.hist = _History(history_s)
        self.gaps = _Gaps(history_s)
        self.states: deque[int] = deque()
        self.peak: deque[tuple[int, int]] = deque()
        self.prev_used: int | None = None
        self.i = 0
        self.warmup_s, self.t0 = warmup_s, math.nan
        self.price = pm.busy_w if wait_price_w is None else wait_price_w
        self.tau, self.tau_at = 0.0, -math.inf

    def _observe(self, t: float, used: int) -> int:
        rise = max(0, used - self.prev_used) if self.prev_used is not None else 0
        self.prev_used = used
        self.rises.append(rise)
        if len(self.rises) > self.window:
            self.rises.popleft()
        x = sum(self.rises)
        self.hist.add(t, x, None)
        if len(self.states) >= self.window:
            self.hist.add(t, x, self.states.popleft())
        while self.peak and self.peak[-1][1] <= x:
            self.peak.pop()
        self.peak.append((self.i, x))
        while self.peak[0][0] <= self.i - self.memory:
            self.peak.popleft()
        state = _bucket(self.peak[0][1])
        self.states.append(state)
        self.i += 1
        r = self.hist.quantile(state, self.q, self.min_samples)
        if r is None:
            r = self.hist.quantile(None, self.q, 1)
        return int(r or 0)

    def step(self, st: CountState, t: float, used: int, taken: list[float]) -> None:
        if math.isnan(self.t0):
            self.t0 = t
        for since in taken:
            self.gaps.add(t, t - since)
        reserve = self._observe(t, used)
        if t - self.t0 < self.warmup_s:
            return
        have = len(st.idle) + len(st.boots)
        if reserve > have:
            st.wake(reserve - have, t)
            return
        if t >= self.tau_at:
            self.tau, self.tau_at = self.gaps.best_timeout(self.pm, self.price), t + 3600.0
        k = 0
        while k < have - reserve and k < len(st.idle) and st.idle[k] <= t - self.tau:
            k += 1
        if k:
            st.power_down(k)


def simulate_counts(
    used: Sequence[int],
    total: Sequence[int],
    step_s: float,
    policy: CountPolicy,
    *,
    boot_s: float = 300.0,
    lo: int = 0,
    hi: int | None = None,
    t0: float = 0.0,
) -> CountResult:
    """Run ``policy`` over steps ``0 .. hi-1``; totals over ``[lo, hi)``."""
    hi = len(used) if hi is None else min(hi, len(used))
    st = CountState(total[0] if total else 0, t0, boot_s)
    res = CountResult()
    for i in range(hi):
        t = t0 + i * step_s
        u, tot = used[i], total[i]
        while st.boots and st.boots[0] <= t:
            heapq.heappop(st.boots)
            st.idle.append(t)
        if tot > st.nodes:  # nodes joined: they come on
            st.idle.extend([t] * (tot - st.nodes))
        taken: list[float] = []
        if u > st.busy:
            k = min(u - st.busy, len(st.idle))
            taken = st.idle[len(st.idle) - k :]
            del st.idle[len(st.idle) - k :]
            st.busy += k
            missing = u - st.busy
            taken += st.wake(max(0, missing - len(st.boots)), t)
            if i >= lo:
                res.shortfall_node_min += missing * step_s / 60
        elif u < st.busy:
            st.idle.extend([t] * (st.busy - u))
            st.busy = u
        if tot < st.nodes:  # nodes left: they stop counting (off or not)
            st.remove(st.nodes - tot)
        downs = st.downs
        policy.step(st, t, u, taken)
        if i >= lo:
            res.power_downs += st.downs - downs
            res.off_node_min += len(st.off) * step_s / 60
            res.boot_node_min += len(st.boots) * step_s / 60
    return res
