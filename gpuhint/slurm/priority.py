"""QSSF hints -> Slurm ``SiteFactor``: the map, the plan of one pass, and the applier.

Pure logic: Slurm and Redis are reached through the two small ports below
(:class:`SlurmPort`, :class:`HintPort`); :mod:`gpuhint.slurm.commands` and
:class:`gpuhint.redis.client.HintClient` are the real ones, the tests use in-memory twins.

The map (:class:`FactorMap`) turns a hint's priority ``p`` (expected service, GPU-seconds;
smaller runs first) into a site factor (larger runs first)::

    factor(p) = round(max_factor * (1 - ln(1 + p/p0) / ln(1 + p_max/p0)))   clipped to [0, max]

It is **bounded** (0 .. ``max_factor``), **monotone** (a smaller ``p`` never gets a
smaller factor) and logarithmic, so jobs of 1 GPU-minute and of 1,000 GPU-days are
still apart. Slurm 22.05 adds the site factor unweighted to the job's priority; choose
``max_factor`` against your other ``PriorityWeight*`` values (docs/slurm.md).

When gpuhint has nothing to say about a job (:class:`Fallback`, docs/operations.md
"gpuhint is down"):

* a pending job **without a hint** gets the **neutral factor**, not 0 (0 is the factor of
  the largest job there is): by default the median factor of the hinted pending jobs in
  the queue (rounded to 1% of ``max_factor``; ``max_factor // 2`` when no job has a
  hint), so an unknown job ranks in the middle of the known ones, not below them all;
* when the cluster shows **no sign of life** (its newest hint and newest load summary
  are older than ``stale_after_s``: the worker, the agent or Kafka is down) every hinted
  factor fades linearly to the neutral one over ``fade_s``; at the end every pending job
  has the same site factor, and a constant added to every job is Slurm's own
  multifactor order again. A hint's own ``created_at`` is not its age: the worker
  rewrites a hint only when its priority changes, so a job that waits for hours under a
  healthy worker keeps an old ``created_at``.

What the applier will and will not touch, every pass:

* only **pending** jobs (with the neutral factor when they have no hint, unless that
  is turned off); never a running, completing or held job;
* never a job a human pinned with ``scontrol update jobid=N Priority=...`` (its priority
  no longer equals the sum of its factors, which is how it is recognised);
* only jobs whose factor would change, at most ``max_updates`` per pass, at most
  ``rate`` a second; never ``Priority=`` itself (that would pin the job);
* one job per pending array record, never its tasks one by one (:mod:`~.arrays`);
* with ``start_comment``, a pending job's ``Comment`` gets its expected start, only
  when the comment is empty or gpuhint's own (:mod:`gpuhint.slurm.start_comment`).

>>> m = FactorMap(max_factor=100_000)
>>> m.factor(0), m.factor(60), m.factor(3600 * 8), m.factor(1e12)
(100000, 95327, 58363, 0)
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuhint.cores.freshness import HintFreshness
from gpuhint.slurm.arrays import Collapsed, collapse_arrays
from gpuhint.slurm.pass_result import PassResult, accepted
from gpuhint.slurm.start_comment import (
    CommentPlan,
    CommentUpdate,
    Start,
    comment_counts,
    plan_comments,
)

log = logging.getLogger("gpuhint.slurm")


MAX_SITE_FACTOR = 2**31 - 4  # scontrol refuses |v| > NICE_OFFSET - 3 ("out of range")


@dataclass(frozen=True)
class FactorMap:
    """Bounded, monotone (non-increasing) map from hint priority to Slurm site factor."""

    max_factor: int = 100_000
    p0: float = 60.0  # GPU-seconds: one GPU-minute
    p_max: float = 64 * 30 * 86400.0  # GPU-seconds: 64 GPUs for 30 days gets factor 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_factor <= MAX_SITE_FACTOR:
            raise ValueError(
                f"max_factor must be within 1..{MAX_SITE_FACTOR}, got {self.max_factor}"
            )
        if not 0 < self.p0 < self.p_max:
            raise ValueError("need 0 < p0 < p_max")

    def factor(self, priority: float) -> int:
        if math.isnan(priority) or priority >= self.p_max:  # no advantage
            return 0
        if priority <= 0:  # the smallest job there is
            return self.max_factor
        frac = math.log1p(priority / self.p0) / math.log1p(self.p_max / self.p0)
        return max(0, min(self.max_factor, round(self.max_factor * (1.0 - frac))))

    @property
    def midpoint(self) -> int:
        return self.max_factor // 2


NEUTRAL_MODES = ("median", "midpoint", "off")


@dataclass(frozen=True)
class Fallback:
    """What a job gets when gpuhint has nothing (fresh) to say about it.

    ``neutral``: ``median`` (the median factor of the hinted pending jobs, rounded to 1%
    of ``max_factor``; the midpoint when none has a hint), ``midpoint`` (``max_factor //
    2``), an integer factor, or ``off`` (unhinted jobs are left alone: the old behaviour).
    ``stale_after_s``: how long the cluster may show no sign of life (no new hint, no new
    load summary) before its hints start to fade; ``fade_s``: how long the fade to the
    neutral factor takes (0: at once), in ``steps`` steps (each step is one update per
    job, not one per pass).

    >>> f = Fallback(stale_after_s=3600, fade_s=1000, steps=10)
    >>> [f.weight(a) for a in (None, 0, 3600, 3601, 4100, 4599, 4600)]
    [1.0, 1.0, 1.0, 1.0, 0.5, 0.1, 0.0]
    >>> f.neutral_factor(FactorMap(1000), [900, 100, 700])
    700
    >>> Fallback(neutral="midpoint").neutral_factor(FactorMap(1000), [900])
    500
    """

    neutral: str | int = "median"
    stale_after_s: float = 3600.0
    fade_s: float = 1800.0
    steps: int = 10

    def __post_init__(self) -> None:
        if isinstance(self.neutral, str) and self.neutral not in NEUTRAL_MODES:
            raise ValueError(f"neutral must be one of {', '.join(NEUTRAL_MODES)} or a factor")
        if isinstance(self.neutral, int) and self.neutral < 0:
            raise ValueError("a neutral factor must be >= 0")
        if self.stale_after_s <= 0 or self.fade_s < 0 or self.steps < 1:
            raise ValueError("need stale_after_s > 0, fade_s >= 0, steps >= 1")

    @property
    def enabled(self) -> bool:
        return self.neutral != "off"

    def weight(self, age_s: float | None) -> float:
        """How much of a hint is left at ``age_s`` (1: all of it, 0: neutral); None: fresh."""
        if age_s is None or age_s <= self.stale_after_s:
            return 1.0
        if self.fade_s <= 0:
            return 0.0
        left = 1.0 - (age_s - self.stale_after_s) / self.fade_s
        return max(0.0, math.ceil(left * self.steps - 1e-9) / self.steps)

    def neutral_factor(self, fmap: FactorMap, hinted: Sequence[int]) -> int:
        """The neutral factor, given the (unfaded) factors of the hinted pending jobs."""
        if isinstance(self.neutral, int):
            return min(self.neutral, fmap.max_factor)
        if self.neutral == "median" and hinted:
            step = max(1, fmap.max_factor // 100)
            med = statistics.median_low(hinted)
            return max(0, min(fmap.max_factor, round(med / step) * step))
        return fmap.midpoint


@dataclass(frozen=True)
class SlurmJob:
    """A job in Slurm's queue, as the applier needs it."""

    job_id: str  # as squeue -r prints it: 123 or 123_4
    state: str  # PENDING, RUNNING, ...
    site_factor: int | None = 0  # None: Slurm did not say (sprio omits ineligible jobs)
    pinned: bool = False  # a human set Priority=
    held: bool = False  # priority 0: held by a user or an admin
    comment: str | None = None  # its Comment ("" none; None: not read)
    raw_id: str | None = None  # squeue's %A: the tasks of a pending array record share it


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
    unhinted: int = 0  # pending jobs without a hint given (or already at) the neutral factor
    faded: int = 0  # hinted jobs given a factor faded towards the neutral one
    neutral_set: int = 0  # of the updates: unhinted jobs moved to the neutral factor

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
    neutral: int | None = None,
    weight: float = 1.0,
) -> Plan:
    """The updates one pass makes: pending, unpinned jobs whose factor changes.

    A hinted job's target is ``fmap.factor(p)``; with a ``neutral`` factor, it is moved
    ``1 - weight`` of the way towards it (``weight`` 1: fresh hints, 0: neutral), and a
    pending job without a hint gets ``neutral`` (``neutral`` None: it is left alone, and
    pinned / held jobs without a hint are not counted).

    A job whose current factor Slurm does not show (``site_factor`` None: ``sprio``
    omits jobs not yet eligible, e.g. a future ``--begin``) is compared with what this
    applier set last (``applied``), else taken as 0.

    When more than ``max_updates`` jobs changed, the ones with the largest target factor
    (a hinted job: the smallest priority, those that gain most from starting early) go
    first.
    """
    changed: list[tuple[int, float, str]] = []
    plan = Plan(updates=[])
    for job in jobs:
        if job.state != "PENDING":
            continue
        hinted = job.job_id in priorities
        if not hinted and neutral is None:
            continue
        if job.pinned:
            plan.skipped_pinned += hinted
            continue
        if job.held:
            plan.skipped_held += hinted
            continue
        if hinted:
            plan.considered += 1
            p = priorities[job.job_id]
            target = fmap.factor(p)
            if neutral is not None and weight < 1.0:
                target = round(neutral + weight * (target - neutral))
                plan.faded += target != fmap.factor(p)
        else:
            p = math.inf
            target = neutral if neutral is not None else 0
            plan.unhinted += 1
        current = job.site_factor
        if current is None:
            current = (applied or {}).get(job.job_id, 0)
        if target == current:
            plan.unchanged += 1
            continue
        changed.append((-target, p, job.job_id))
    changed.sort()
    if max_updates is not None and len(changed) > max_updates:
        plan.deferred = len(changed) - max_updates
        changed = changed[:max_updates]
    plan.neutral_set = sum(1 for _, p, _ in changed if p == math.inf)
    by_factor: dict[int, list[str]] = {}
    for neg_target, _, job_id in changed:
        by_factor.setdefault(-neg_target, []).append(job_id)
    for target in sorted(by_factor, reverse=True):
        ids = by_factor[target]
        for i in range(0, len(ids), per_line):
            plan.updates.append(Update(tuple(ids[i : i + per_line]), target))
    return plan


class SlurmPort(Protocol):
    def queue(self) -> list[SlurmJob]: ...
    def apply(self, lines: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class HintSnapshot:
    """The hints of a cluster's queued jobs, and when the cluster last showed life.

    ``last_alive``: UNIX seconds of the newest sign that the worker still hints this
    cluster (the newest ``created_at`` of its hints, the newest load summary); None:
    no sign at all (no hint, no load summary).
    """

    priorities: dict[str, float]
    last_alive: float | None = None


class HintPort(Protocol):
    def priorities(self, cluster: str) -> dict[str, float]: ...


class StartsPort(Protocol):
    """A :class:`HintPort` that also reads the expected starts (job id -> :class:`Start`)."""

    def starts(self, cluster: str) -> dict[str, Start]: ...


class SnapshotHintPort(HintPort, Protocol):
    """A :class:`HintPort` that also says how fresh the cluster's hints are."""

    def snapshot(self, cluster: str) -> HintSnapshot: ...


class PriorityApplier:
    """Runs passes: read hints and Slurm's queue, plan, apply (or only print: dry run).

    ``fallback`` says what unhinted jobs and stale hints get (:class:`Fallback`; its
    default: the median neutral factor, fade after 1 h over 30 min). ``hint_errors``:
    the exceptions of the hint port that mean "Redis is unreachable"; on those a pass
    goes on with the last hints it read (new jobs get the neutral factor, the others
    keep theirs until the hints are stale, then fade), or, with none read yet, raises
    and changes nothing. ``wall``: UNIX time, to age hints. ``start_comment``: also
    write each pending job's expected start into its Comment (a hint port with
    ``starts``, :class:`StartsPort`), through the same batches and rate limit.
    """

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
        fallback: Fallback | None = None,
        hint_errors: tuple[type[BaseException], ...] = (),
        wall: Callable[[], float] = time.time,
        start_comment: bool = False,
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
        self.fallback = fallback or Fallback()
        self.hint_errors = hint_errors
        self.wall = wall
        self.start_comment = start_comment  # expected starts into pending jobs' Comment
        self._pace = (0.0, 0)  # (when this pass began applying, jobs applied since)
        self.total_updated = 0
        self.total_refused = 0
        self.applied: dict[str, int] = {}  # job id -> factor set (pending jobs only)
        self.last_snapshot: HintSnapshot | None = None  # the last hints read from Redis
        self.freshness = HintFreshness(
            cluster, "jobs without a hint get the neutral factor, hints fade to it"
        )
        self._ages = callable(getattr(hints, "snapshot", None))  # else: ages unknown

    def _snapshot(self) -> tuple[HintSnapshot, str]:
        try:
            snap = getattr(self.hints, "snapshot", None)
            got = snap(self.cluster) if snap else HintSnapshot(self.hints.priorities(self.cluster))
        except self.hint_errors as exc:
            if self.last_snapshot is None or not self.fallback.enabled:
                self._set_state("redis_down", f"{exc}; no hints read yet: nothing changed")
                raise
            self._set_state(
                "redis_down",
                f"{exc}; using the {len(self.last_snapshot.priorities)} hints read last "
                "(jobs without one get the neutral factor, the others fade once stale)",
            )
            return self.last_snapshot, "cache"
        self.last_snapshot = got
        return got, "redis"

    def _set_state(self, state: str, detail: str) -> None:
        self.freshness.set(state, detail)

    @property
    def state(self) -> str | None:
        """``fresh``, ``stale`` or ``redis_down`` (None before the first pass)."""
        return self.freshness.state

    def run_pass(self) -> PassResult:
        t0 = self.clock()
        snap, source = self._snapshot()
        arrays = collapse_arrays(self.slurm.queue())  # a pending array record: one job
        queue, priorities = arrays.queue, arrays.spread(snap.priorities)
        fb = self.fallback
        age = None if snap.last_alive is None else max(0.0, self.wall() - snap.last_alive)
        # a port without ages: every hint counts as fresh
        fresh = not self._ages or (age is not None and age <= fb.stale_after_s)
        if self._ages and source == "redis":
            self.freshness.observe(age, fb.stale_after_s)
        neutral: int | None = None
        weight = 1.0
        if fb.enabled:
            pend = [j.job_id for j in queue if j.state == "PENDING" and j.job_id in priorities]
            neutral = fb.neutral_factor(self.fmap, [self.fmap.factor(priorities[j]) for j in pend])
            weight = fb.weight(age)
        plan = plan_pass(
            queue,
            priorities,
            self.fmap,
            max_updates=self.max_updates,
            applied=self.applied,
            neutral=neutral,
            weight=weight,
        )
        lines = [u.line for u in plan.updates]
        errors: list[str] = []
        self._pace = (self.clock(), 0)
        if not self.dry_run:
            errors = self._apply_rate_limited(plan.updates)
            pending = {j.job_id for j in queue}
            self.applied = {k: v for k, v in self.applied.items() if k in pending}
            self.applied.update(accepted(plan.updates, errors))  # refused: sent again
        refused = len(errors)
        updated = plan.jobs - (refused if not self.dry_run else 0)
        self.total_updated += max(0, updated)
        self.total_refused += refused
        comments, comment_errors = self._comments(arrays, weight, source)
        return PassResult(
            pending_hinted=plan.considered + plan.skipped_pinned + plan.skipped_held,
            updated=max(0, updated),
            unchanged=plan.unchanged,
            skipped_pinned=plan.skipped_pinned,
            skipped_held=plan.skipped_held,
            deferred=plan.deferred,
            refused=refused,
            lines=lines + [u.line for u in comments.updates] if comments else lines,
            errors=errors + comment_errors,
            seconds=self.clock() - t0,
            pending_unhinted=plan.unhinted,
            neutral_set=plan.neutral_set,
            neutral_factor=neutral,
            faded=plan.faded,
            hint_age_s=age,
            hints_fresh=fresh,
            hints_from=source,
            start_comment=comments is not None,
            comments=comment_counts(comments, len(comment_errors)),
        )

    def _comments(
        self, arrays: Collapsed[SlurmJob], weight: float, source: str
    ) -> tuple[CommentPlan | None, list[str]]:
        """Plan and (unless a dry run) write the expected-start comments (None: none this
        pass: off, or Redis unreachable, when the comments stay as they are). When the
        hints have faded to neutral, the forecasts (made in their order) are void: cleared."""
        read = getattr(self.hints, "starts", None)
        if not self.start_comment or read is None or source != "redis":
            return None, []
        try:
            starts: Mapping[str, Start] = read(self.cluster) if weight > 0 else {}
        except self.hint_errors as exc:
            log.warning("expected starts unreadable, comments left as they are: %s", exc)
            return None, []
        plan = plan_comments(arrays.queue, arrays.spread(starts), max_updates=self.max_updates)
        return plan, [] if self.dry_run else self._apply_rate_limited(plan.updates)

    def _apply_rate_limited(self, updates: Sequence[Update | CommentUpdate]) -> list[str]:
        """Apply in batches of about ``batch`` jobs, at most ``rate`` jobs per second
        (over the whole pass: SiteFactors, then comments)."""
        errors: list[str] = []
        chunk: list[Update | CommentUpdate] = []
        size = 0
        started, done = self._pace
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
        self._pace = (started, done)
        return errors
