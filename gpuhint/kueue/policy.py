"""Which WorkloadPriorityClass each pending Workload should carry (pure: no I/O).

gpuhint ranks jobs by expected service (GPU-seconds, smallest first); Kueue admits the
highest ``spec.priority`` first (then the oldest). The applier maps a hint onto one of a
**bounded ladder of WorkloadPriorityClasses** it owns, ``gpuhint-00`` (largest expected
service, value ``base``) .. ``gpuhint-NN`` (smallest, value ``base + N - 1``), by log-spaced
buckets of expected service, so a class only changes when a hint crosses a bucket edge:
few patches, and Kueue's FIFO order among equals is kept.

Only Workloads that are waiting (no quota reserved, not admitted, not finished, active)
and whose Job carries no priority class or one of gpuhint's are touched: an admitted
Workload, or a Job whose owner chose its own class, is never relabelled.

Preemption guard: priority also drives Kueue's preemption. For a ClusterQueue whose
preemption policies are all ``Never`` (Kueue's default) no relabelling can preempt
anything. Otherwise a waiting Workload is given at most a class *strictly below* the lowest
priority admitted in its ClusterQueue (its whole cohort, when it has one), so it can never
become a preemptor because of gpuhint; when even the lowest class is too high, it is left
alone and counted as skipped (``preemption-guard``), unless it carries a higher one of
gpuhint's classes: that one goes down to the lowest.

gpuhint down (docs/operations.md): a waiting Workload **without a hint** gets the
**neutral class** (by default the median class of the hinted waiting Workloads, the
middle class ``classes // 2`` when none has a hint), not Kueue's default priority 0,
which ranks it with the largest jobs; when the cluster shows no sign of life for
``stale_after_s`` the hinted classes fade to the neutral one (``fade_weight``), and
with every waiting Workload in one class Kueue's own order (FIFO) is back.

>>> ladder = ClassLadder(classes=4, base=100, min_service_s=100, max_service_s=1e6)
>>> [ladder.class_for(s).name for s in (50, 2_000, 50_000, 1e7)]
['gpuhint-03', 'gpuhint-02', 'gpuhint-01', 'gpuhint-00']
>>> ladder.class_for(50).value
103
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

CLASS_PREFIX = "gpuhint-"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_ID_LABEL = "gpuhint.io/job-id"
SERVICE_LABEL = "gpuhint.io/expected-service-gpu-s"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NEVER = "Never"


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int


@dataclass(frozen=True)
class ClassLadder:
    """``classes`` WorkloadPriorityClasses over log-spaced buckets of expected service."""

    classes: int = 10
    base: int = 0
    min_service_s: float = 600.0  # 10 GPU-minutes and below: the top class
    max_service_s: float = 8 * 86400.0 * 8  # 8 GPUs for 8 days and above: the bottom class
    prefix: str = CLASS_PREFIX

    def __post_init__(self) -> None:
        if not 2 <= self.classes <= 100:
            raise ValueError(f"classes must be within 2..100, got {self.classes}")
        if not 0 < self.min_service_s < self.max_service_s:
            raise ValueError("need 0 < min service < max service")
        if not -(10**9) <= self.base <= 10**9 - self.classes:
            raise ValueError(f"base {self.base} is out of Kueue's priority range")

    def all(self) -> list[PriorityClass]:
        return [self.at(k) for k in range(self.classes)]

    def at(self, k: int) -> PriorityClass:
        return PriorityClass(f"{self.prefix}{k:02d}", self.base + k)

    def owns(self, name: str | None) -> bool:
        """One of gpuhint's classes: of this ladder, or of one with other ``classes``
        (``gpuhint-NN``): a Job labelled before the ladder shrank is still gpuhint's to
        move, not an owner's own class that outranks the whole ladder for ever."""
        rung = name[len(self.prefix) :] if name and name.startswith(self.prefix) else ""
        return len(rung) == 2 and rung.isascii() and rung.isdigit()

    def neutral_class(self, mode: str | int, hinted: Sequence[int]) -> PriorityClass:
        """The class of a Workload without a (fresh) hint: ``median`` (median rung of
        the hinted waiting Workloads, else the middle), ``midpoint`` (``classes // 2``)
        or a rung number."""
        if isinstance(mode, int):
            return self.at(max(0, min(self.classes - 1, mode)))
        if mode == "median" and hinted:
            return self.at(statistics.median_low(hinted))
        return self.at(self.classes // 2)

    def class_for(self, service_s: float) -> PriorityClass:
        """Smaller expected service -> a higher class (admitted earlier)."""
        lo, hi = math.log(self.min_service_s), math.log(self.max_service_s)
        x = math.log(max(service_s, 1e-9))
        frac = (x - lo) / (hi - lo)
        bucket = min(self.classes - 1, max(0, math.floor(frac * self.classes)))
        return self.at(self.classes - 1 - bucket)


@dataclass(frozen=True)
class WorkloadView:
    """What the policy needs of one Workload and its Job."""

    namespace: str
    name: str
    job_name: str | None  # the owning batch/v1 Job (None: not a Job's Workload)
    job_id: str  # the gpuhint job id: the Job's gpuhint.io/job-id label, else its UID
    cluster_queue: str | None
    job_class: str | None  # the Job's kueue.x-k8s.io/priority-class label
    priority: int  # the Workload's spec.priority (0 when unset)
    pending: bool  # no quota reserved, not admitted, not finished, active
    class_kind: str | None = None  # spec.priorityClassRef.kind (e.g. PriorityClass)
    notes: tuple[str | None, ...] = (None, None, None)  # its expected-start annotations
    # quota reserved or admitted, and not finished: a possible preemption target
    # (None: whenever not pending)
    holds_quota: bool | None = None

    @property
    def running(self) -> bool:
        return (not self.pending) if self.holds_quota is None else self.holds_quota


@dataclass(frozen=True)
class QueuePolicy:
    """The preemption settings of one ClusterQueue (Kueue's defaults: all ``Never``)."""

    name: str
    cohort: str | None = None
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER

    @property
    def may_preempt(self) -> bool:
        return any(
            p not in (NEVER, "")
            for p in (
                self.within_cluster_queue,
                self.reclaim_within_cohort,
                self.borrow_within_cohort,
            )
        )


Skip = Literal["admitted", "not-a-job", "foreign-class", "no-hint", "preemption-guard"]


def fade_weight(age_s: float | None, stale_after_s: float, fade_s: float, steps: int = 10) -> float:
    """How much of a hint is left when the cluster showed no life for ``age_s``: 1 up
    to ``stale_after_s`` (and when unknown, None), then linearly down to 0 over
    ``fade_s`` in ``steps`` steps (0 at once when ``fade_s`` is 0).

    >>> [fade_weight(a, 3600, 1000) for a in (None, 3600, 4100, 4600)]
    [1.0, 1.0, 0.5, 0.0]
    """
    if age_s is None or age_s <= stale_after_s:
        return 1.0
    if fade_s <= 0:
        return 0.0
    left = 1.0 - (age_s - stale_after_s) / fade_s
    return max(0.0, math.ceil(left * steps - 1e-9) / steps)


@dataclass(frozen=True)
class Relabel:
    namespace: str
    job_name: str
    workload: str
    job_id: str
    old_class: str | None
    new_class: PriorityClass
    service_s: float | None  # None: no hint (the neutral class)


@dataclass
class Plan:
    relabel: list[Relabel] = field(default_factory=list)
    unchanged: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    unhinted: int = 0  # waiting Workloads without a hint, given the neutral class
    faded: int = 0  # hinted ones given a class faded towards the neutral one

    def skip(self, why: Skip) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def priority_ceilings(
    queues: Iterable[QueuePolicy], workloads: Iterable[WorkloadView]
) -> dict[str, int | None]:
    """Per ClusterQueue: the highest priority gpuhint may give (None: no limit).

    A queue that may preempt gets ``min(admitted priority in its cohort, or itself) - 1``;
    with nothing admitted there is nothing to preempt, so no limit.
    """
    queues = list(queues)
    low_by_cq: dict[str, int] = {}
    for w in workloads:
        if w.running and w.cluster_queue:  # a finished one cannot be preempted
            cur = low_by_cq.get(w.cluster_queue)
            low_by_cq[w.cluster_queue] = w.priority if cur is None else min(cur, w.priority)
    members: dict[str, list[str]] = {}
    for q in queues:
        if q.cohort:
            members.setdefault(q.cohort, []).append(q.name)
    out: dict[str, int | None] = {}
    for q in queues:
        if not q.may_preempt:
            out[q.name] = None
            continue
        scope = members.get(q.cohort, [q.name]) if q.cohort else [q.name]
        lows = [low_by_cq[n] for n in scope if n in low_by_cq]
        out[q.name] = min(lows) - 1 if lows else None
    return out


def plan(
    workloads: Iterable[WorkloadView],
    services: Mapping[str, float],
    ladder: ClassLadder,
    queues: Iterable[QueuePolicy] = (),
    *,
    neutral: PriorityClass | None = None,
    weight: float = 1.0,
) -> Plan:
    """The relabels that bring every pending gpuhint-managed Workload to its class.

    ``services`` maps gpuhint job id -> expected service (the hint's ``priority``).
    A Workload already in its class is ``unchanged`` (no patch). With a ``neutral``
    class, a Workload without a hint gets it when its ClusterQueue has hinted waiting
    Workloads or when it still carries one of gpuhint's classes (else it is skipped,
    ``no-hint``: a queue gpuhint does not rank keeps Kueue's order) and a hinted one is
    moved ``1 - weight`` of the way towards it (``weight`` 0: stale hints).
    """
    workloads = list(workloads)
    queues = list(queues)
    ceilings = priority_ceilings(queues, workloads)
    # a ClusterQueue none of whose waiting Workloads has a hint is not ranked by gpuhint
    # (or all its Workloads are equal anyway): its unhinted Workloads keep Kueue's order
    served = {w.cluster_queue for w in workloads if w.pending and w.job_id in services}
    out = Plan()
    for w in workloads:
        if not w.pending:
            out.skip("admitted")
            continue
        if w.job_name is None:
            out.skip("not-a-job")
            continue
        if (w.job_class and not ladder.owns(w.job_class)) or (
            w.class_kind and w.class_kind != "WorkloadPriorityClass"
        ):
            out.skip("foreign-class")
            continue
        service = services.get(w.job_id)
        if service is None:
            # a queue gpuhint does not rank keeps Kueue's order, unless gpuhint ranked the
            # Workload before (its class is one of gpuhint's): that class fades to neutral
            if neutral is None or (w.cluster_queue not in served and not w.job_class):
                out.skip("no-hint")
                continue
            target = neutral
            out.unhinted += 1
        else:
            target = ladder.class_for(service)
            if neutral is not None and weight < 1.0:
                k = target.value - ladder.base
                n = neutral.value - ladder.base
                faded = ladder.at(round(n + weight * (k - n)))
                out.faded += faded != target
                target = faded
        cap = ceilings.get(w.cluster_queue) if w.cluster_queue else None
        if cap is not None and target.value > cap:
            k = cap - ladder.base
            if k < 0 and (not w.job_class or w.job_class == ladder.at(0).name):
                out.skip("preemption-guard")
                continue
            # even gpuhint-00 is too high: one of gpuhint's higher classes (given before
            # a lower one was admitted) still goes down to it, the least it can do
            target = ladder.at(max(0, min(k, ladder.classes - 1)))
        if target.name == w.job_class:
            out.unchanged += 1
            continue
        out.relabel.append(
            Relabel(w.namespace, w.job_name, w.name, w.job_id, w.job_class, target, service)
        )
    return out
