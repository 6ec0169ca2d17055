"""QSSF hints -> Slurm ``SiteFactor``: the map, the plan of one pass, and the applier.

Pure logic: Slurm and Redis are reached through the two small ports below
(:class:`SlurmPort`, :class:`HintPort`); :mod:`gpuhint.slurm.commands` and
:class:`gpuhint.client.HintClient` are the real ones, the tests use in-memory twins.

The map (:class:`FactorMap`) turns a hint's priority ``p`` (expected service, GPU-seconds;
smaller runs first) into a site factor (larger runs first)::

    factor(p) = round(max_factor * (1 - ln(1 + p/p0) / ln(1 + p_max/p0)))   clipped to [0, max]

It is **bounded** (0 .. ``max_factor``), **monotone** (a smaller ``p`` never gets a
smaller factor) and logarithmic, so jobs of 1 GPU-minute and of 1,000 GPU-days are
still apart. Slurm 22.05 adds the site factor unweighted to the job's priority; choose
``max_factor`` against your other ``PriorityWeight*`` values (docs/slurm.md).

What the applier will and will not touch, every pass:

* only **pending** jobs that have a hint; never a running, completing or held job;
* never a job a human pinned with ``scontrol update jobid=N Priority=...`` (its priority
  no longer equals the sum of its factors, which is how it is recognised);
* only jobs whose factor would change (so a steady queue costs no update at all);
* at most ``max_updates`` per pass, at most ``rate`` updates per second;
* it never sets ``Priority=`` itself (that would pin the job).

>>> m = FactorMap(max_factor=100_000)
>>> m.factor(0), m.factor(60), m.factor(3600 * 8), m.factor(1e12)
(100000, 95327, 58363, 0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class FactorMap:
    """Bounded, monotone (non-increasing) map from hint priority to Slurm site factor."""

    max_factor: int = 100_000
    p0: float = 60.0  # GPU-seconds: one GPU-minute
    p_max: float = 64 * 30 * 86400.0  # GPU-seconds: 64 GPUs for 30 days gets factor 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_factor <= 2**31 - 1:
            raise ValueError(f"max_factor must be within 1..{2**31 - 1}, got {self.max_factor}")
        if not 0 < self.p0 < self.p_max:
            raise ValueError("need 0 < p0 < p_max")

    def factor(self, priority: float) -> int:
        if math.isnan(priority) or priority >= self.p_max:  # no advantage
            return 0
        if priority <= 0:  # the smallest job there is
            return self.max_factor
        frac = math.log1p(priority / self.p0) / math.log1p(self.p_max / self.p0)
        return max(0, min(self.max_factor, round(self.max_factor * (1.0 - frac))))


@dataclass(frozen=True)
class SlurmJob:
    """A job in Slurm's queue, as the applier needs it."""

    job_id: str  # as squeue -r prints it: 123 or 123_4
    state: str  # PENDING, RUNNING, ...
    site_factor: int | None = 0  # None: Slurm did not say (sprio omits ineligible jobs)
    pinned: bool = False  # a human set Priority=
    held: bool = False  # priority 0: held by a user or an admin


@dataclass(frozen=True)
class Update:
    """``scontrol update jobid=... SiteFactor=...`` for jobs that get the same factor."""

    job_ids: tuple[str, ...]
    site_factor: int

    @property
    def line(self) -> str:
        return f"update jobid={','.join(self.job_ids)} SiteFactor={self.site_factor}"


@dataclass
class Plan:
    updates: list[Update]
    considered: int = 0  # pending jobs with a hint
    unchanged: int = 0
    skipped_pinned: int = 0
    skipped_held: int = 0
    deferred: int = 0  # over max_updates: left for the next pass

    @property
    def jobs(self) -> int:
        return sum(len(u.job_ids) for u in self.updates)


def plan_pass(
    jobs: Iterable[SlurmJob],
    priorities: Mapping[str, float],
    fmap: FactorMap,
    *,
    max_updates: int | None = None,
    per_line: int = 100,
    applied: Mapping[str, int] | None = None,
) -> Plan:
    """The updates one pass makes: pending, unpinned, hinted jobs whose factor changes.

    A job whose current factor Slurm does not show (``site_factor`` None: ``sprio``
    omits jobs not yet eligible, e.g. a future ``--begin``) is compared with what this
    applier set last (``applied``), else taken as 0.

    When more than ``max_updates`` jobs changed, the ones with the smallest priority
    (those that gain most from starting early) go first.
    """
    changed: list[tuple[float, str, int]] = []
    plan = Plan(updates=[])
    for job in jobs:
        if job.state != "PENDING" or job.job_id not in priorities:
            continue
        if job.pinned:
            plan.skipped_pinned += 1
            continue
        if job.held:
            plan.skipped_held += 1
            continue
        plan.considered += 1
        p = priorities[job.job_id]
        target = fmap.factor(p)
        current = job.site_factor
        if current is None:
            current = (applied or {}).get(job.job_id, 0)
        if target == current:
            plan.unchanged += 1
            continue
        changed.append((p, job.job_id, target))
    changed.sort()
    if max_updates is not None and len(changed) > max_updates:
        plan.deferred = len(changed) - max_updates
        changed = changed[:max_updates]
    by_factor: dict[int, list[str]] = {}
    for _, job_id, target in changed:
        by_factor.setdefault(target, []).append(job_id)
    for target in sorted(by_factor, reverse=True):
        ids = by_factor[target]
        for i in range(0, len(ids), per_line):
            plan.updates.append(Update(tuple(ids[i : i + per_line]), target))
    return plan


class SlurmPort(Protocol):
    def queue(self) -> list[SlurmJob]: ...
    def apply(self, lines: Sequence[str]) -> list[str]: ...


class HintPort(Protocol):
    def priorities(self, cluster: str) -> dict[str, float]: ...


@dataclass
class PassResult:
    """What one pass did (``--json`` prints it; keys are stable)."""

    pending_hinted: int
    updated: int
    unchanged: int
    skipped_pinned: int
    skipped_held: int
    deferred: int
    refused: int
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "pending_hinted": self.pending_hinted,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped_pinned": self.skipped_pinned,
            "skipped_held": self.skipped_held,
            "deferred": self.deferred,
            "refused": self.refused,
            "errors": self.errors[:20],
            "seconds": round(self.seconds, 3),
        }


class PriorityApplier:
    """Runs passes: read hints and Slurm's queue, plan, apply (or only print: dry run)."""

    def __init__(
        self,
        slurm: SlurmPort,
        hints: HintPort,
        cluster: str,
        fmap: FactorMap | None = None,
        *,
        dry_run: bool = False,
        max_updates: int | None = None,
        rate: float | None = None,
        batch: int = 500,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.slurm = slurm
        self.hints = hints
        self.cluster = cluster
        self.fmap = fmap or FactorMap()
        self.dry_run = dry_run
        self.max_updates = max_updates
        self.rate = rate
        self.batch = batch
        self.clock = clock
        self.sleep = sleep
        self.total_updated = 0
        self.total_refused = 0
        self.applied: dict[str, int] = {}  # job id -> factor set (pending jobs only)

    def run_pass(self) -> PassResult:
        t0 = self.clock()
        priorities = self.hints.priorities(self.cluster)
        queue = self.slurm.queue()
        plan = plan_pass(
            queue, priorities, self.fmap, max_updates=self.max_updates, applied=self.applied
        )
        lines = [u.line for u in plan.updates]
        errors: list[str] = []
        if not self.dry_run:
            errors = self._apply_rate_limited(plan.updates)
            pending = {j.job_id for j in queue}
            self.applied = {k: v for k, v in self.applied.items() if k in pending}
            for u in plan.updates:
                self.applied.update(dict.fromkeys(u.job_ids, u.site_factor))
        refused = len(errors)
        updated = plan.jobs - (refused if not self.dry_run else 0)
        self.total_updated += max(0, updated)
        self.total_refused += refused
        return PassResult(
            pending_hinted=plan.considered + plan.skipped_pinned + plan.skipped_held,
            updated=max(0, updated),
            unchanged=plan.unchanged,
            skipped_pinned=plan.skipped_pinned,
            skipped_held=plan.skipped_held,
            deferred=plan.deferred,
            refused=refused,
            lines=lines,
            errors=errors,
            seconds=self.clock() - t0,
        )

    def _apply_rate_limited(self, updates: Sequence[Update]) -> list[str]:
        """Apply in batches of about ``batch`` jobs, at most ``rate`` jobs per second."""
        errors: list[str] = []
        chunk: list[Update] = []
        size = 0
        started = self.clock()
        done = 0
        for u in [*updates, None]:
            if u is not None:
                chunk.append(u)
                size += len(u.job_ids)
                if size < self.batch:
                    continue
            if not chunk:
                break
            if self.rate:
                ahead = done / self.rate - (self.clock() - started)
                if ahead > 0:
                    self.sleep(ahead)
            errors.extend(self.slurm.apply([c.line for c in chunk]))
            done += size
            chunk, size = [], 0
        return errors
