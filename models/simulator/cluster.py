"""The nodes of one virtual cluster and the artifact's consolidating placement.

Placement follows the Helios artifact (``policies/placer/consolidate.py``) exactly:

* a job of at most one node's GPUs goes to the *fullest* node it fits on (fewest free
  GPUs that are still enough), the lowest-numbered such node on a tie;
* a job of a multiple of 8 GPUs takes that many *whole* free nodes, lowest-numbered first;
* any other larger job takes ``g // 8`` whole free nodes and puts the remainder on the
  node with the most free GPUs left (a further whole node if there is one).

Per free-GPU level the nodes sit in a heap (lazy deletion), so a placement costs
O(log nodes) and a feasibility check O(GPUs per node).

>>> nodes = Nodes(2)
>>> nodes.place(3), nodes.place(4), nodes.place(2)
([(0, 3)], [(0, 4)], [(1, 2)])
>>> nodes.can_place(16)
False
"""

from __future__ import annotations

import heapq

Alloc = list[tuple[int, int]]
"""Where a job runs: ``(node, gpus)`` pairs."""


class Nodes:
    """Free GPUs per node of one VC; all nodes have ``gpus_per_node`` GPUs."""

    __slots__ = ("count", "free", "gpus_per_node", "heaps", "num_nodes", "total_free")

    def __init__(self, num_nodes: int, gpus_per_node: int = 8) -> None:
        if num_nodes < 0 or gpus_per_node < 1:
            raise ValueError("num_nodes must be >= 0 and gpus_per_node >= 1")
        g = gpus_per_node
        self.num_nodes = num_nodes
        self.gpus_per_node = g
        self.free = [g] * num_nodes
        self.count = [0] * (g + 1)
        self.count[g] = num_nodes
        self.heaps: list[list[int]] = [[] for _ in range(g + 1)]
        self.heaps[g] = list(range(num_nodes))
        self.total_free = g * num_nodes

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def _lowest(self, level: int) -> int:
        """Lowest-numbered node with exactly ``level`` free GPUs (one must exist)."""
        heap = self.heaps[level]
        free = self.free
        while free[heap[0]] != level:
            heapq.heappop(heap)
        return heap[0]

    def _set(self, node: int, new_free: int) -> None:
        self.count[self.free[node]] -= 1
        self.count[new_free] += 1
        self.total_free += new_free - self.free[node]
        self.free[node] = new_free
        heapq.heappush(self.heaps[new_free], node)

    def can_place(self, gpus: int) -> bool:
        """Whether :meth:`place` would succeed now (no side effects)."""
        g = self.gpus_per_node
        count = self.count
        if gpus > self.total_free:
            return False
        if gpus <= g:
            return any(count[f] for f in range(max(gpus, 1), g + 1))
        whole, rest = divmod(gpus, g)
        if count[g] < whole:
            return False
        if rest == 0 or count[g] > whole:
            return True
        return any(count[f] for f in range(rest, g))

    def place(self, gpus: int) -> Alloc | None:
        """Allocate ``gpus`` GPUs as the artifact's consolidating placer does, or None."""
        if gpus < 1 or not self.can_place(gpus):
            return None
        g = self.gpus_per_node
        count = self.count
        if gpus <= g:
            for level in range(gpus, g + 1):
                if count[level]:
                    node = self._lowest(level)
                    self._set(node, level - gpus)
                    return [(node, gpus)]
            return None  # pragma: no cover - can_place said yes
        whole, rest = divmod(gpus, g)
        alloc: Alloc = []
        for _ in range(whole):
            node = self._lowest(g)
            self._set(node, 0)
            alloc.append((node, g))
        if rest:
            level = g if count[g] else max(f for f in range(rest, g) if count[f])
            node = self._lowest(level)
            self._set(node, level - rest)
            alloc.append((node, rest))
        return alloc

    def release(self, alloc: Alloc) -> None:
        for node, gpus in alloc:
            new_free = self.free[node] + gpus
            if new_free > self.gpus_per_node:
                raise ValueError(f"node {node} released more GPUs than it has")
            self._set(node, new_free)
