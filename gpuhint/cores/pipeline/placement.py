"""Partition placement that follows load: pure, no Kafka or Faust.

Work is split by VC key and a few keys hash unevenly onto partitions (16 VCs on 8
partitions: 3, 0, 2, 0, 1, 3, 3, 4), so a count-balanced assignment can give one worker
twice the events of another. :func:`balance_by_load` re-deals partitions by their known
load (longest first, each to the least-loaded worker; LPT), keeping a partition where it
is on a tie, and is used only when it lowers the busiest worker's load by
``min_gain``: a rebalance moves state, so a small gain is not worth it.

>>> load = {0: 3, 1: 0, 2: 2, 3: 0, 4: 1, 5: 3, 6: 3, 7: 4}
>>> current = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}   # 5 vs 11
>>> new = balance_by_load(current, load, 8)
>>> sorted(sum(load[p] for p in ps) for ps in new.values())
[8, 8]
>>> balance_by_load({"a": {0, 2}, "b": {1, 3}}, {0: 1, 1: 1, 2: 1, 3: 1}, 4) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

__all__ = ["PartitionLoad", "RebalanceProbe", "balance_by_load", "busiest"]


class PartitionLoad:
    """The load of each partition of a topic, from what the broker tells any consumer:
    its end offsets and the group's committed offsets, sampled now and then.

    ``weights()`` is each partition's lag (events the group has still to handle) plus
    its recent rate times ``horizon_s`` (events it will bring meanwhile): a partition
    with a backlog or a busy stream weighs more. The rate is an exponentially weighted
    mean of ``(end - previous end) / elapsed`` with the given ``half_life_s``.

    >>> pl = PartitionLoad(horizon_s=10.0, half_life_s=0.0)
    >>> pl.sample(0.0, {0: 100, 1: 0}, {0: 40, 1: None})
    >>> pl.sample(2.0, {0: 120, 1: 0}, {0: 60, 1: None})
    >>> pl.weights()   # lag 60 + 10 events/s * 10 s; partition 1 is empty
    {0: 160.0, 1: 0.0}
    """

    def __init__(self, horizon_s: float = 10.0, half_life_s: float = 30.0) -> None:
        self.horizon_s = horizon_s
        self.half_life_s = half_life_s
        self.lag: dict[int, int] = {}
        self.rate: dict[int, float] = {}
        self._last: tuple[float, dict[int, int]] | None = None

    def sample(
        self, now: float, end: Mapping[int, int], committed: Mapping[int, int | None]
    ) -> None:
        """One reading: end offsets, and committed offsets (None: the group never
        committed there, so all of the partition is still to handle)."""
        self.lag = {p: max(0, e - (committed.get(p) or 0)) for p, e in end.items()}
        if self._last is not None and now > self._last[0]:
            elapsed = now - self._last[0]
            keep = 0.5 ** (elapsed / self.half_life_s) if self.half_life_s > 0 else 0.0
            for p, e in end.items():
                r = max(0.0, (e - self._last[1].get(p, e)) / elapsed)
                # from 0, not from the first reading: a backlog produced at once is a
                # burst, not a rate, and it is already counted as lag
                self.rate[p] = keep * self.rate.get(p, 0.0) + (1 - keep) * r
        self._last = (now, dict(end))

    def weights(self) -> dict[int, float]:
        return {
            p: float(self.lag[p]) + self.rate.get(p, 0.0) * self.horizon_s for p in sorted(self.lag)
        }


def busiest(assignment: Mapping[str, Set[int]], load: Mapping[int, float]) -> float:
    """The largest total load one worker carries under ``assignment``."""
    return max((sum(load.get(p, 0.0) for p in ps) for ps in assignment.values()), default=0.0)


def balance_by_load(
    current: Mapping[str, Set[int]],
    load: Mapping[int, float],
    partitions: int,
    min_gain: float = 0.1,
) -> dict[str, set[int]] | None:
    """Partitions ``0..partitions-1`` re-dealt to ``current``'s workers by ``load``, or
    None when that would not lower the busiest worker's load by ``min_gain`` (a share).

    Partitions without a known load get the mean of the known ones. Deal order:
    heaviest first; each to the worker with the least load so far, then the one that
    holds it in ``current``, then the one with the fewest partitions, then by name, so
    the result is deterministic. A partition with no load stays with its holder (moving
    it would cost a state recovery for nothing).
    """
    workers = sorted(current)
    known = [v for p, v in load.items() if 0 <= p < partitions]
    if len(workers) < 2 or not known or sum(known) <= 0:
        return None
    mean = sum(known) / len(known)
    weight = {p: float(load.get(p, mean)) for p in range(partitions)}
    owner = {p: w for w in workers for p in current[w]}
    dealt: dict[str, set[int]] = {w: set() for w in workers}
    carried = dict.fromkeys(workers, 0.0)
    for p in sorted(range(partitions), key=lambda p: (-weight[p], p)):
        if weight[p] <= 0 and owner.get(p) in dealt:
            best = owner[p]
        else:
            best = min(workers, key=lambda w: (carried[w], owner.get(p) != w, len(dealt[w]), w))
        dealt[best].add(p)
        carried[best] += weight[p]
    before, after = busiest(current, weight), busiest(dealt, weight)
    if before <= 0 or after > before * (1.0 - min_gain):
        return None
    return dealt


@dataclass
class RebalanceProbe:
    """When the group leader should ask for a new deal although no worker came or went.

    A deal happens when membership changes; a group that formed before the events came
    (or whose load moved since) keeps a deal by count. The leader, which knows the deal
    it handed out, feeds every load sample to :meth:`observe`; it says to rebalance when
    :func:`balance_by_load` would lower the busiest worker's load by ``min_gain`` (a
    share, above the deal's own 10%: a rebalance pauses every worker) *and* by
    ``min_events`` (events the busiest worker is spared: a small backlog drains sooner
    than a rebalance ends), for ``sustain`` samples in a row since the last rebalance
    (:meth:`in_generation`), and not within ``cooldown_s`` of the last one it asked for
    (:meth:`asked`): if that deal did not even the load out (the load moved meanwhile),
    the group is not asked again at once, so it never flaps.

    >>> probe = RebalanceProbe(min_gain=0.2, min_events=1000, sustain=2, cooldown_s=30)
    >>> deal = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}
    >>> load = {0: 3000.0, 1: 0.0, 2: 2000.0, 3: 0.0, 4: 1000.0, 5: 3000.0, 6: 3000.0, 7: 4000.0}
    >>> probe.observe(0.0, deal, load, 8)  # 11,000 vs 5,000, once
    False
    >>> probe.observe(1.0, deal, load, 8)  # twice in a row: 8,000 each after a deal
    True
    >>> probe.asked(1.5)
    >>> [probe.observe(t, deal, load, 8) for t in (2.0, 3.0, 31.0, 32.0)]  # cooling down
    [False, False, False, True]
    >>> probe.in_generation(5)  # a worker came or went: two fresh samples, no cool-down
    >>> [probe.observe(t, deal, load, 8) for t in (41.0, 42.0)]
    [False, True]
    """

    min_gain: float = 0.2
    min_events: float = 50_000.0
    sustain: int = 2
    cooldown_s: float = 30.0
    settle_s: float = 5.0
    """Samples within this long of a rebalance do not count: a partition that moved
    commits only once its new owner has restored and saved, so its lag reads stale."""
    _streak: int = field(default=0, repr=False)
    _last_asked: float | None = field(default=None, repr=False)
    _generation: int | None = field(default=None, repr=False)
    _generation_since: float | None = field(default=None, repr=False)

    def observe(
        self,
        now: float,
        deal: Mapping[str, Set[int]],
        load: Mapping[int, float],
        partitions: int,
    ) -> bool:
        """One load sample under ``deal`` (member -> partitions): rebalance now?"""
        since = self._generation_since
        if since is not None and now - since < self.settle_s:
            self._streak = 0
            return False
        better = balance_by_load(deal, load, partitions, self.min_gain)
        if better is None or busiest(deal, load) - busiest(better, load) < self.min_events:
            self._streak = 0
            return False
        self._streak += 1
        if self._last_asked is not None and now - self._last_asked < self.cooldown_s:
            return False
        return self._streak >= self.sustain

    def asked(self, now: float) -> None:
        """The leader asked for a rebalance on this probe's word: the cool-down starts."""
        self._last_asked = now
        self._streak = 0

    def in_generation(self, generation: int | None, now: float | None = None) -> None:
        """The group generation of this sample (seen at ``now``): a new one means a
        rebalance ran; its samples count after ``settle_s``."""
        if generation != self._generation:
            self._generation = generation
            self._generation_since = now
            self._streak = 0
