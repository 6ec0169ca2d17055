"""The CES core: per-slot cluster observations in, power advisories out. No I/O of its own.

The Faust worker and ``gpuhint evaluate ces`` both drive :class:`CesEngine`; they differ
only in where observations come from (a :class:`ClusterLoadTracker` fed by NodeStatus
and job events, or a recorded load series) and which store they pass.

Timing: ``observe`` is called at the *end* of slot ``t`` with the slot's peak used
nodes. The forecaster learns from it, the policy decides the powered-on count for slot
``t+1``, and the engine writes a cluster :class:`PowerAdvisory` (``node=None``), one
per node named in a power-down or a wake, and a :class:`ClusterLoad`.

>>> from gpuhint.cores.sink import InMemoryStore
>>> store = InMemoryStore()
>>> eng = CesEngine(store)
>>> step = eng.observe(SlotObservation(time=0.0, used=3, total=10,
...                    idle_nodes=(("n9", 0.0), ("n8", -50.0))))
>>> _ = store.flush(); store.get_advisory("default").action.value
'keep'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuhint.cores.ces_load import (
    ClusterLoadTracker,
    SlotObservation,
    _Node,
    _Tracked,
    observations_from_series,
)
from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import (
    ClusterLoad,
    PowerAction,
    PowerAdvisory,
)
from models.forecast import Forecast, Forecaster, LoadForecaster
from models.power_policy import Decision, PowerPolicy, PowerPolicyConfig

__all__ = [
    "CesEngine",
    "CesStats",
    "CesStep",
    "ClusterLoadTracker",
    "ForecasterFactory",
    "SlotObservation",
    "_Node",  # checkpoints (pickles) name the tracker's classes by this module
    "_Tracked",
    "observations_from_series",
]

ForecasterFactory = Callable[[], Forecaster]


@dataclass
class CesStep:
    """The outcome of one slot: the decision, its forecast and the messages written."""

    decision: Decision
    forecast: Forecast
    advisories: list[PowerAdvisory]
    load: ClusterLoad


@dataclass
class _Cluster:
    forecaster: Forecaster
    policy: PowerPolicy
    slot: int = 0


@dataclass
class CesStats:
    slots: int = 0
    power_downs: int = 0
    wakes: int = 0
    shortfall_slots: int = 0
    advisories_written: int = 0


class CesEngine:
    """Drives a forecaster and the power policy per cluster and writes advisories."""

    def __init__(
        self,
        store: HintStore | None = None,
        config: PowerPolicyConfig | None = None,
        forecaster_factory: ForecasterFactory | None = None,
        emit_messages: bool = True,
        advise: bool = True,
    ) -> None:
        """``advise`` False: write only the ClusterLoad (another engine advises power)."""
        self.store = store
        self.config = config or PowerPolicyConfig()
        self.forecaster_factory: ForecasterFactory = forecaster_factory or (
            lambda: LoadForecaster(slot_s=self.config.slot_s)
        )
        self.emit_messages = emit_messages or store is not None
        self.advise = advise
        self.clusters: dict[str, _Cluster] = {}
        self.stats = CesStats()

    def _cluster(self, name: str, total: int) -> _Cluster:
        c = self.clusters.get(name)
        if c is None:
            c = _Cluster(self.forecaster_factory(), PowerPolicy(self.config, total))
            self.clusters[name] = c
        return c

    def observe(self, obs: SlotObservation) -> CesStep:
        """Process the slot that just closed; return the decision for the next slot."""
        c = self._cluster(obs.cluster, obs.total)
        if obs.active is not None:
            c.policy.sync_active(obs.active, obs.total)
        fc = c.forecaster.update(obs.time, obs.used, obs.total)
        d = c.policy.step(c.slot, obs.used, obs.total, fc)
        c.slot += 1
        s = self.stats
        s.slots += 1
        if d.shortfall:
            s.shortfall_slots += 1
        if d.changed:
            if d.action == "wake":
                s.wakes += 1
            else:
                s.power_downs += 1
        advisories: list[PowerAdvisory] = []
        load = _EMPTY_LOAD
        if self.emit_messages:
            advisories = self.advisories(obs, d, fc)
            load = ClusterLoad(
                cluster=obs.cluster,
                time=obs.time + self.config.slot_s,
                total_nodes=obs.total,
                active_nodes=d.previous,
                used_nodes=obs.used,
                busy_gpus=obs.busy_gpus,
                total_gpus=obs.total_gpus,
                idle_nodes=tuple(n for n, _ in obs.idle_nodes),
                unhealthy_nodes=obs.unhealthy_nodes,
            )
            if self.store is not None:
                if self.advise:
                    for a in advisories:
                        self.store.put_advisory(a)
                    s.advisories_written += len(advisories)
                self.store.put_load(load)
        return CesStep(d, fc, advisories, load)

    def energy_kwh(self, nodes: float, seconds: float) -> float:
        return max(0.0, nodes) * self.config.watts_per_node * seconds / 3.6e6

    def advisories(self, obs: SlotObservation, d: Decision, fc: Forecast) -> list[PowerAdvisory]:
        """The cluster summary and one advisory per node named in the change."""
        now = obs.time + self.config.slot_s  # the decision is taken at the slot's end
        action = PowerAction(d.action)
        names: tuple[str, ...] = ()
        if action is PowerAction.POWER_DOWN:
            # longest idle first; the cluster's list order breaks ties
            idle = sorted(enumerate(obs.idle_nodes), key=lambda p: (p[1][1], p[0]))
            names = tuple(n for _, (n, _) in idle[: d.count])
        elif action is PowerAction.WAKE:
            names = obs.off_nodes[: d.count]
        off_after = max(0, d.total - d.active)
        common = {
            "cluster": obs.cluster,
            "time": now,
            "used_nodes": float(obs.used),
            "total_nodes": d.total,
            "forecast_nodes": fc.point,
            "forecast_upper_nodes": fc.upper,
            "horizon_s": fc.horizon_s,
        }
        out = [
            PowerAdvisory(
                action=action,
                count=d.count,
                nodes=names,
                reason=d.reason + f" [assumes {self.config.watts_per_node:g} W per idle node]",
                active_nodes=d.active,
                est_energy_saved_kwh=self.energy_kwh(off_after, fc.horizon_s),
                **common,  # type: ignore[arg-type]
            )
        ]
        for n in names:
            out.append(
                PowerAdvisory(
                    node=n,
                    action=action,
                    count=1,
                    nodes=(n,),
                    reason=d.reason,
                    active_nodes=d.active,
                    est_energy_saved_kwh=(
                        self.energy_kwh(1, fc.horizon_s)
                        if action is PowerAction.POWER_DOWN
                        else 0.0
                    ),
                    **common,  # type: ignore[arg-type]
                )
            )
        return out


_EMPTY_LOAD = ClusterLoad(time=0.0, total_nodes=0, active_nodes=0, used_nodes=0)
