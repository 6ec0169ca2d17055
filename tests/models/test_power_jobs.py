"""JobAwareCore's decision rule as documented (models/power_jobs.py), pinned: the offline
simulator's published figures (docs/ces.md) depend on it."""

from __future__ import annotations

from models.power_jobs import JobAwareConfig, JobAwareCore
from models.simulator.power import PowerModel


class _View:
    idle: dict[int, float] = {}  # noqa: RUF012
    n_boot = 0

    def __init__(self, freeing: int) -> None:
        self.freeing = freeing

    def head_gpus(self) -> int:
        return 8  # one node

    def freeing_gpus(self, until: float) -> int:
        return self.freeing


def test_nodes_freed_within_a_boot_count_against_the_head_and_the_reserve_together() -> None:
    def wake(freeing: int) -> int:
        core = JobAwareCore(JobAwareConfig(warmup_s=0), PowerModel(), 8, t0=0.0)
        core.reserve = lambda: 3  # type: ignore[method-assign]
        return core.decide(100.0, _View(freeing)).wake

    assert wake(0) == 4  # 1 for the head + 3 of reserve
    assert wake(16) == 2  # two nodes' worth of jobs end within a boot: they serve either
    assert wake(80) == 0  # ten nodes' worth cover the head and the reserve: no wake
