"""Faust's partition assignor, then the job-event partitions re-dealt by load.

Faust balances partitions by count. Every worker here also samples the load of all the
job-event partitions from the broker every second (:func:`group_offsets`: end offsets and
the group's commits; :class:`gpuhint.cores.pipeline.placement.PartitionLoad`: lag + recent rate)
into
:attr:`LoadView.snapshot`, so whichever worker leads the next rebalance knows it. When that
load says another deal would lower the busiest worker's share by at least
``min_gain`` (:func:`gpuhint.cores.pipeline.placement.balance_by_load`), the leader hands out that
deal
for the job-event topic and every topic co-partitioned with it (the VC and CES state
changelogs, cluster telemetry): state moves with its partition as in any rebalance.

Where the leader has no load for every partition yet (the sampler starts with Faust's
timers, after the worker's first assignment: a group's first deal is Faust's), or no
partition has any (a group that forms before the events), or standby replicas are
configured, Faust's assignment stands.

A deal happens when the group rebalances, and membership changes (a worker joins, leaves
or dies) are what start one. So the leader also remembers the deal it handed out
(:attr:`LoadView.dealt`, with the group generation it is for) and, when the load says a
deal by load would be much better (:class:`gpuhint.cores.pipeline.placement.RebalanceProbe`), asks
the
group to rebalance (:func:`request_rejoin`) -- as Kafka Streams' probing rebalances do.
The hook is Faust's ``_protocol_assignments`` (checked against :data:`CHECKED_VERSIONS`);
other Faust versions use Faust's assignor unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.assignor import PartitionAssignor
from faust.types import TP

from gpuhint.cores.pipeline.placement import PartitionLoad, RebalanceProbe, balance_by_load, busiest
from streams.faust_consumer import CHECKED_VERSIONS

log = logging.getLogger(__name__)

__all__ = [
    "LoadAwareAssignor",
    "LoadSampler",
    "LoadView",
    "assignor_class",
    "deal_by_load",
    "group_generation",
    "group_offsets",
    "request_rejoin",
]


@dataclass
class LoadView:
    """What the leader's assignor reads: the job topic and the latest load snapshot
    (replaced whole by the worker's timer, so another thread reads it safely)."""

    job_topic: str
    min_gain: float = 0.1
    snapshot: dict[int, float] = field(default_factory=dict)
    deals: int = 0
    """Assignments this worker handed out by load (as the leader)."""
    dealt: dict[str, set[int]] | None = None
    """The job topic's deal (member -> partitions) this worker handed out as the leader,
    when a deal by load could replace it (None: not the leader, or no deal possible)."""
    dealt_generation: int | None = None
    """The group generation :attr:`dealt` is for (the leader of a later one is another)."""
    probes: int = 0
    """Rebalances this worker asked for, for load alone."""


def dealable(
    actives: Mapping[str, Mapping[str, list[int]]],
    standbys: Mapping[str, Mapping[str, list[int]]],
    topic_groups: Mapping[str, int],
    view: LoadView,
) -> tuple[list[str], dict[str, set[int]]] | None:
    """The topics co-partitioned with the job topic and each member's job partitions, if
    a deal by load may replace ``actives`` (member -> topic -> partitions), else None."""
    group = topic_groups.get(view.job_topic)
    if group is None or len(actives) < 2:
        return None
    topics = sorted(t for t, g in topic_groups.items() if g == group)
    if any(standbys[m].get(t) for m in standbys for t in topics):
        return None  # standby replicas: keep Faust's (it places them with the actives)
    # Faust groups topics by partition count: deal only when every member subscribes to
    # every topic of the group and holds the same partitions of each (co-partitioned).
    # A member without one (another build, CES off) would be handed a topic it did not
    # subscribe to, which its consumer refuses.
    for a in actives.values():
        if any(t not in a for t in topics):
            return None
        if any(sorted(a[t]) != sorted(a[view.job_topic]) for t in topics):
            return None
    current = {m: set(a.get(view.job_topic, ())) for m, a in actives.items()}
    partitions = len(set().union(*current.values()))
    if set().union(*current.values()) != set(range(partitions)):
        return None
    return topics, current


def deal_by_load(
    actives: Mapping[str, MutableMapping[str, list[int]]],
    standbys: Mapping[str, Mapping[str, list[int]]],
    topic_groups: Mapping[str, int],
    view: LoadView,
) -> bool:
    """Re-deal the job topic's co-partitioned group in ``actives`` (member -> topic ->
    partitions) by ``view``'s load; return whether anything changed. Either way
    :attr:`LoadView.dealt` is the job topic's deal when one by load was possible."""
    view.dealt = None
    plan = dealable(actives, standbys, topic_groups, view)
    if plan is None:
        return False
    topics, current = plan
    view.dealt = current
    partitions = len(set().union(*current.values()))
    load = dict(view.snapshot)
    if set(load) != set(range(partitions)):
        return False  # no guessing: every partition's load, or Faust's deal
    dealt = balance_by_load(current, load, partitions, view.min_gain)
    if dealt is None:
        return False
    for member, parts in dealt.items():
        for t in topics:
            actives[member][t] = sorted(parts)
    view.dealt = dealt
    view.deals += 1
    log.info(
        "partitions of %s dealt by load: busiest worker %.0f -> %.0f (%s)",
        view.job_topic,
        busiest(current, load),
        busiest(dealt, load),
        "; ".join(f"{m[-8:]}: {sorted(p)}" for m, p in sorted(dealt.items())),
    )
    return True


def _coordinator(app: Any) -> Any:
    """The worker's aiokafka group coordinator, or None while its consumer is down."""
    consumer = getattr(getattr(app.consumer, "_thread", None), "_consumer", None)
    return getattr(consumer, "_coordinator", None)


def group_generation(app: Any) -> int | None:
    """The consumer group generation this worker is in (None: not in one yet)."""
    coordinator = _coordinator(app)
    generation = getattr(coordinator, "generation", None)
    return generation if isinstance(generation, int) and generation >= 0 else None


async def request_rejoin(app: Any, generation: int, timeout: float = 3.0) -> bool:
    """Ask the group for a rebalance (this worker rejoins; as the leader, that starts a
    round for all, the others following at their next heartbeat), in the consumer
    thread that owns the coordinator, and only while the group is still in
    ``generation`` (the one this worker led): a follower's rejoin would only revoke its
    own partitions. Returns whether it asked."""

    async def rejoin() -> bool:
        coordinator = _coordinator(app)
        if coordinator is None or coordinator.generation != generation:
            return False
        coordinator.request_rejoin()
        return True

    asked: bool = await asyncio.wait_for(app.consumer._thread.call_thread(rejoin), timeout)
    return asked


async def group_offsets(
    app: Any, topic: str, partitions: int, timeout: float = 3.0
) -> tuple[dict[int, int], dict[int, int | None]]:
    """End offsets of ``topic``'s partitions and the worker group's committed offsets
    there (None: never committed), all partitions, not only this worker's."""
    tps = [TP(topic, p) for p in range(partitions)]
    thread = app.consumer._thread

    async def read() -> tuple[dict[int, int], dict[int, int | None]]:
        # in the consumer thread, bounded there: its call queue (2 slots) also carries
        # Faust's fetches and commits, and the commit fetch retries while the group
        # coordinator is unknown
        consumer = thread._ensure_consumer()

        async def both() -> tuple[dict[int, int], dict[int, int | None]]:
            end = await consumer.end_offsets(tps)
            # one OffsetFetch for all partitions (``consumer.committed`` asks per partition)
            commits = await consumer._coordinator.fetch_committed_offsets(tps)
            done = {tp.partition: commits[tp].offset if tp in commits else -1 for tp in tps}
            return (
                {tp.partition: int(end[tp]) for tp in tps if tp in end},
                {p: o if o >= 0 else None for p, o in done.items()},  # -1: never committed
            )

        return await asyncio.wait_for(both(), timeout)

    result: tuple[dict[int, int], dict[int, int | None]] = await thread.call_thread(read)
    return result


class LoadAwareAssignor(PartitionAssignor):
    """Faust's assignor; as the leader, the job-event partitions re-dealt by load."""

    def _protocol_assignments(
        self,
        assignments: Any,
        cl_distribution: Any,
        tp_distribution: Any,
        topic_groups: Mapping[str, int],
    ) -> Any:
        view: LoadView | None = getattr(self.app, "gpuhint_load", None)
        if view is not None:
            view.dealt_generation = None  # first: no reader pairs the new deal with the old
            try:
                actives = {m: a.actives for m, a in assignments.items()}
                standbys = {m: a.standbys for m, a in assignments.items()}
                if deal_by_load(actives, standbys, topic_groups, view):
                    cl_distribution = self._get_changelog_distribution(assignments)
                    tp_distribution = self._get_external_topic_distribution(assignments)
                # the leader's deal, for its rebalance probe (the generation was set by
                # the JoinGroup response this assignment answers)
                view.dealt_generation = group_generation(self.app)
            except Exception:  # never fail a rebalance over a better deal
                view.dealt = None
                log.exception("dealing partitions by load failed; Faust's assignment stands")
        return super()._protocol_assignments(
            assignments, cl_distribution, tp_distribution, topic_groups
        )


def assignor_class(by_load: bool) -> type[Any]:
    """:class:`LoadAwareAssignor` when asked for and the installed Faust was checked."""
    if by_load and faust.__version__ in CHECKED_VERSIONS:
        return LoadAwareAssignor
    if by_load:
        log.warning(
            "faust-streaming %s is not one the load-aware assignor was checked against "
            "(%s): partitions are assigned by count",
            faust.__version__,
            ", ".join(CHECKED_VERSIONS),
        )
    return PartitionAssignor


class LoadSampler:
    """The worker's timer (every second): the job-event partitions' load (lag + recent
    rate, from the broker: any worker may lead the next rebalance) into
    :attr:`LoadView.snapshot` for the assignor to deal them by; as the leader, with a
    ``probe``, ask the group to rebalance when a deal by load would be much better."""

    def __init__(
        self, app: Any, view: LoadView, partitions: int, probe: RebalanceProbe | None
    ) -> None:
        self.app = app
        self.view = view
        self.partitions = partitions
        self.probe = probe
        self.load = PartitionLoad(horizon_s=10.0, half_life_s=30.0)

    async def tick(self) -> None:
        app, view = self.app, self.view
        if app.rebalancing:
            return  # the group's commits move meanwhile: keep the last view
        now = time.monotonic()
        generation = group_generation(app)
        if self.probe is not None:
            self.probe.in_generation(generation, now)  # a rebalance ran: sample afresh
        try:
            end, committed = await group_offsets(app, view.job_topic, self.partitions, timeout=3.0)
        except Exception as exc:  # broker busy or consumer stopping: keep the last view
            log.debug("partition load not sampled: %s: %s", type(exc).__name__, exc)
            return
        self.load.sample(now, end, committed)
        view.snapshot = weights = self.load.weights()
        if app.rebalancing or group_generation(app) != generation:
            return  # a rebalance ran meanwhile: this sample's deal may not be ours
        dealt = view.dealt
        if dealt is not None and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "partition load (generation %s, dealt for %s): %s; busiest worker %.0f",
                generation,
                view.dealt_generation,
                {p: round(v) for p, v in weights.items()},
                busiest(dealt, weights),
            )
        if (
            self.probe is not None
            and dealt is not None
            and generation is not None
            and view.dealt_generation == generation
            and set(weights) == set().union(*dealt.values())  # all the deal covers
            and self.probe.observe(now, dealt, weights, len(weights))
        ):
            await self._ask(now, generation, dealt, weights)

    async def _ask(
        self, now: float, generation: int, dealt: Any, weights: Mapping[int, float]
    ) -> None:
        assert self.probe is not None
        log.info(
            "asking the group to rebalance for load: the busiest worker carries %.0f "
            "of %.0f (events behind + 10 s at the recent rate)",
            busiest(dealt, weights),
            sum(weights.values()),
        )
        self.probe.asked(now)
        try:
            asked = await request_rejoin(self.app, generation)
        except Exception as exc:  # consumer stopping or busy
            asked = False
            log.debug("rejoin: %s: %s", type(exc).__name__, exc)
        if asked:
            self.view.probes += 1
        else:
            log.info("rebalance for load not asked: the group moved on meanwhile")
