"""Fault scenarios on a real Kafka broker, a real Redis and real ``gpuhint worker`` processes.

Each scenario replays the same trace (good events, optionally interleaved with hostile
messages), injects its fault (SIGKILL a worker, kill the broker or Redis for a while),
waits until the workers have committed every offset, and compares the final Redis
state with the reference: the hints a single in-process :class:`~gpuhint.cores.qssf.HintEngine`
writes for the same good events. ``bench/chaos.py`` runs them all; ``tests/faults``
runs the short ones.

The harness owns its servers (it kills and restarts them), so it always uses the
project's launcher, never an external service.

The parts: the worker processes (:mod:`~gpuhint.lab.faults.chaos_workers`), the servers,
the reference and the comparison (:mod:`~gpuhint.lab.faults.chaos_harness`), the fault
scenarios (:mod:`~gpuhint.lab.faults.chaos_scenarios`) and the kill storm and load runs
(:mod:`~gpuhint.lab.faults.chaos_load`); this module names every scenario and stays
the import path of all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuhint.lab.faults.chaos_harness import (
    ChaosHarness,
    ScenarioResult,
    reference_first_hints,
    reference_hints,
)
from gpuhint.lab.faults.chaos_load import (
    CommitWatch,
    big_vc_events,
    kill_storm,
    kill_storm_run,
    load_run,
    many_vcs_events,
)
from gpuhint.lab.faults.chaos_scenarios import (
    broker_down,
    duplicates,
    malformed,
    rebalance,
    redis_restart,
    reference,
    resent,
    sigkill_worker,
)
from gpuhint.lab.faults.chaos_workers import Workers

__all__ = [
    "SCENARIOS",
    "Chaos",
    "CommitWatch",
    "ScenarioResult",
    "Workers",
    "big_vc_events",
    "broker_down",
    "duplicates",
    "kill_storm",
    "kill_storm_run",
    "load_run",
    "malformed",
    "many_vcs_events",
    "rebalance",
    "redis_restart",
    "reference",
    "reference_first_hints",
    "reference_hints",
    "resent",
    "sigkill_worker",
]


class Chaos(ChaosHarness):
    """The harness (:class:`~gpuhint.lab.faults.chaos_harness.ChaosHarness`) that runs
    every scenario of :data:`SCENARIOS` by name."""

    def run(self, name: str, timeout_s: float = 300.0, **kw: Any) -> ScenarioResult:
        return SCENARIOS[name](self, timeout_s=timeout_s, **kw)


SCENARIOS: dict[str, Callable[..., ScenarioResult]] = {
    "reference": reference,
    "sigkill_worker": sigkill_worker,
    "two_workers_one_killed": rebalance,
    "broker_down_30s": lambda c, timeout_s: broker_down(c, timeout_s, 30.0),
    "broker_down_150s": lambda c, timeout_s: broker_down(c, timeout_s, 150.0),
    "redis_restart_empty": lambda c, timeout_s: redis_restart(c, timeout_s, aof=False),
    "redis_restart_aof": lambda c, timeout_s: redis_restart(c, timeout_s, aof=True),
    "malformed_10000": malformed,
    "kill_storm": kill_storm,
    "duplicates_1pct": duplicates,
}
"""Every scenario of ``bench/chaos.py``, by the name it reports under."""
