"""One applier pass: read hints and the cached cluster, relabel what changed, rate-limited.

>>> from gpuhint.kueue.memory import InMemoryKueue
>>> from gpuhint.kueue.hints import MemoryHints
>>> from gpuhint.wire.contract import PriorityHint
>>> kueue = InMemoryKueue()
>>> kueue.add_job("ml", "small", job_id="j1", cluster_queue="cq")
>>> import time
>>> hint = PriorityHint(job_id="j1", cluster="c", num_gpus=1, submit_time=0,
...     predicted_duration_s=60, priority=60, model="m", model_version="1",
...     created_at=time.time())
>>> report = Applier(kueue, MemoryHints({"j1": hint}), "c").run_pass()
>>> report.relabelled, kueue.jobs["ml/small"].job_class
(1, 'gpuhint-09')
>>> Applier(kueue, MemoryHints({"j1": hint}), "c").run_pass().relabelled
0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from gpuhint.cores.applier_hints import ApplierHints, UnreadableHints, read_applier_hints
from gpuhint.cores.freshness import HintFreshness
from gpuhint.kueue.hints import HintReader
from gpuhint.kueue.policy import (
    ClassLadder,
    QueuePolicy,
    Relabel,
    WorkloadView,
    fade_weight,
    plan,
)
from gpuhint.kueue.start_note import ANNOTATIONS, Annotate, NotePlan, Notes, Start, plan_notes

log = logging.getLogger("gpuhint.kueue")


class KueueBackend(Protocol):
    """What a pass needs of a cluster (:class:`~gpuhint.kueue.kube.KubeKueue` or the twin)."""

    def views(self) -> list[WorkloadView]: ...
    def queues(self) -> list[QueuePolicy]: ...
    def relabel(
        self, namespace: str, job: str, class_name: str, service_s: float | None
    ) -> bool: ...
    def ensure_classes(self, ladder: ClassLadder, dry_run: bool = False) -> list[str]: ...
    def annotate(self, namespace: str, workload: str, notes: dict[str, str | None]) -> bool: ...
    def unlabel(self, namespace: str, job: str) -> bool: ...


@dataclass(frozen=True)
class Cleared:
    """What :func:`clear_all` removed (or would, on a dry run)."""

    classes: int
    """Waiting Jobs whose gpuhint class label went (Kueue's default priority again)."""
    notes: int
    """Waiting Workloads whose expected-start annotations went."""
    failed: int = 0
    """Patches the API server failed (logged): those Jobs / Workloads keep gpuhint's."""


def clear_all(backend: KueueBackend, ladder: ClassLadder, dry_run: bool = False) -> Cleared:
    """Turn gpuhint off on a cluster: remove its class from every waiting Job and its
    expected-start annotations from every waiting Workload (admitted ones are left).
    One failed patch is logged and counted; the others go on."""
    views = backend.views()
    failed = 0

    def done(what: str, patch: Callable[..., bool], *args: Any) -> bool:
        nonlocal failed
        if dry_run:
            return True
        try:
            return patch(*args)
        except Exception as exc:  # one refused Job must not stop turning gpuhint off
            log.warning("clear %s: %s", what, exc)
            failed += 1
            return False

    classes = 0
    for v in views:
        if v.pending and v.job_name and ladder.owns(v.job_class):
            where = f"{v.namespace}/{v.job_name}"
            classes += done(where, backend.unlabel, v.namespace, v.job_name)
    notes = 0
    for a in plan_notes(views, {}).patches:  # no forecast: every annotated one is cleared
        where = f"{a.namespace}/{a.workload}"
        notes += done(where, backend.annotate, a.namespace, a.workload, a.notes)
    return Cleared(classes, notes, failed)


class TokenBucket:
    """``rate`` patches per second with bursts of ``burst``; ``rate <= 0``: unlimited."""

    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.clock = clock
        self.sleep = sleep
        self.tokens = float(self.burst)
        self.last = clock()
        self.waited_s = 0.0
        self._lock = threading.Lock()

    def take(self) -> None:
        if self.rate <= 0:
            return
        while True:
            with self._lock:
                now = self.clock()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= 1 - 1e-9:  # float dust must not stall the loop
                    self.tokens = max(0.0, self.tokens - 1)
                    return
                wait = (1 - self.tokens) / self.rate
            self.waited_s += wait
            self.sleep(wait)


@dataclass
class PassReport:
    """What one pass saw and did (``--json`` prints it)."""

    workloads: int = 0
    pending: int = 0
    hints: int = 0
    relabelled: int = 0
    unchanged: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    refused: int = 0  # admitted (or gone) between the cache and the patch: not touched
    errors: int = 0
    dry_run: bool = False
    seconds: float = 0.0
    planned: list[dict[str, Any]] = field(default_factory=list)
    unhinted: int = 0  # waiting Workloads without a hint, in the neutral class
    neutral_set: int = 0  # of the relabelled: unhinted ones moved to the neutral class
    faded: int = 0  # hinted ones whose class was faded towards the neutral one
    neutral_class: str | None = None  # None: unhinted Workloads left alone (neutral off)
    neutral_value: int | None = None
    hint_age_s: float | None = None  # since the cluster's last sign of life (None: none)
    hints_fresh: bool = True
    hints_from: str = "redis"  # "cache": Redis failed, the last hints read were used
    expected_start: bool = False  # the expected-start annotations were planned this pass
    starts_annotated: int = 0  # waiting Workloads given new expected-start values
    starts_cleared: int = 0  # ... whose annotations were removed (no forecast names them)
    starts_unchanged: int = 0
    planned_starts: list[dict[str, Any]] = field(default_factory=list)  # dry run

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Applier:
    """Hints -> WorkloadPriorityClass labels on the waiting Jobs of one gpuhint cluster.

    ``neutral`` (``median``, ``midpoint``, a rung number, or ``off``), ``stale_after_s``
    and ``fade_s``: what Workloads without a hint and stale hints get (module
    :mod:`gpuhint.kueue.policy`). ``hint_errors``: the exceptions of the hint reader
    that mean "Redis is unreachable"; on those a pass goes on with the hints it read
    last, or, with none read yet, raises and changes nothing. ``wall``: UNIX time.
    ``start_note``: also annotate each waiting Workload with its expected start
    (:mod:`gpuhint.kueue.start_note`; a hint reader with ``job_starts``), through the
    same rate limit.
    """

    def __init__(
        self,
        backend: KueueBackend,
        hints: HintReader,
        cluster: str,
        ladder: ClassLadder | None = None,
        *,
        rate: float = 20.0,
        burst: int = 50,
        workers: int = 4,
        dry_run: bool = False,
        bucket: TokenBucket | None = None,
        neutral: str | int = "median",
        stale_after_s: float = 3600.0,
        fade_s: float = 1800.0,
        hint_errors: tuple[type[BaseException], ...] = (),
        wall: Callable[[], float] = time.time,
        start_note: bool = False,
    ) -> None:
        self.backend = backend
        self.hints = hints
        self.cluster = cluster
        self.ladder = ladder or ClassLadder()
        self.dry_run = dry_run
        self.workers = max(1, workers)
        self.bucket = bucket or TokenBucket(rate, burst)
        self.neutral = neutral
        self.stale_after_s = stale_after_s
        self.fade_s = fade_s
        self.hint_errors = hint_errors
        self.wall = wall
        self.start_note = start_note
        self._told_403 = False  # a refused relabel (RBAC) was logged as an error
        self.noted: dict[tuple[str, str], Notes] = {}  # what was written (cache lag)
        self.last_read: ApplierHints | None = None
        self.unreadable = UnreadableHints(cluster)
        self.freshness = HintFreshness(
            cluster, "Workloads without a hint get the neutral class, hints fade to it"
        )

    def ensure_classes(self) -> list[str]:
        return self.backend.ensure_classes(self.ladder, self.dry_run)

    def _read(self) -> tuple[ApplierHints, str]:
        try:
            got = read_applier_hints(self.hints, self.cluster)
        except self.hint_errors as exc:
            if self.last_read is None or self.neutral == "off":
                self._set_state("redis_down", f"{exc}; no hints read yet: nothing changed")
                raise
            self._set_state(
                "redis_down",
                f"{exc}; using the {len(self.last_read.services)} hints read last (Workloads "
                "without one get the neutral class, the others fade once stale)",
            )
            return self.last_read, "cache"
        self.unreadable.said(got.unreadable)
        self.last_read = got
        return got, "redis"

    def _set_state(self, state: str, detail: str) -> None:
        self.freshness.set(state, detail)

    @property
    def state(self) -> str | None:
        """``fresh``, ``stale`` or ``redis_down`` (None before the first pass)."""
        return self.freshness.state

    def run_pass(self) -> PassReport:
        t0 = time.perf_counter()
        got, source = self._read()
        services = got.services
        views = self.backend.views()
        age = None if got.last_alive is None else max(0.0, self.wall() - got.last_alive)
        fresh = age is not None and age <= self.stale_after_s
        if source == "redis":
            self.freshness.observe(age, self.stale_after_s)
        neutral = None
        weight = 1.0
        if self.neutral != "off":
            rungs = [
                self.ladder.class_for(services[v.job_id]).value - self.ladder.base
                for v in views
                if v.pending
                and v.job_name is not None
                and v.job_id in services
                and (not v.job_class or self.ladder.owns(v.job_class))
            ]
            neutral = self.ladder.neutral_class(self.neutral, rungs)
            weight = fade_weight(age, self.stale_after_s, self.fade_s)
        queues = self.backend.queues()
        p = plan(views, services, self.ladder, queues, neutral=neutral, weight=weight)
        report = PassReport(
            workloads=len(views),
            pending=sum(1 for v in views if v.pending),
            hints=len(services),
            unchanged=p.unchanged,
            skipped=dict(p.skipped),
            dry_run=self.dry_run,
            unhinted=p.unhinted,
            faded=p.faded,
            neutral_class=None if neutral is None else neutral.name,
            neutral_value=None if neutral is None else neutral.value,
            hint_age_s=age,
            hints_fresh=fresh,
            hints_from=source,
        )
        if self.dry_run:
            report.planned = [_describe(r) for r in p.relabel]
        elif p.relabel:
            self._apply(p.relabel, report)
        if self.start_note and source == "redis":
            self._notes(views, weight, report)
        report.seconds = time.perf_counter() - t0
        return report

    def _notes(self, views: list[WorkloadView], weight: float, report: PassReport) -> None:
        """Plan and (unless a dry run) write the expected-start annotations. Unreadable
        starts leave them as they are; hints faded to neutral void the forecasts (made in
        their order): the annotations are removed."""
        read = getattr(self.hints, "job_starts", None)
        if read is None:
            return
        try:
            starts = {j: Start(*t) for j, t in read(self.cluster).items()} if weight > 0 else {}
        except self.hint_errors as exc:
            log.warning("expected starts unreadable, annotations left as they are: %s", exc)
            return
        pending = {(v.namespace, v.name) for v in views if v.pending}
        self.noted = {k: v for k, v in self.noted.items() if k in pending}
        p: NotePlan = plan_notes(views, starts, self.noted)
        report.expected_start = True
        report.starts_unchanged = p.unchanged
        if self.dry_run:
            report.planned_starts = [a.describe() for a in p.patches]
            report.starts_annotated, report.starts_cleared = p.set, p.cleared
            return
        for a in p.patches:
            if not self.start_note:
                break
            self._annotate(a, report)

    def _annotate(self, a: Annotate, report: PassReport) -> None:
        self.bucket.take()
        try:
            ok = self.backend.annotate(a.namespace, a.workload, a.notes)
        except Exception as exc:  # one bad Workload must not stop the pass
            if _no_answer(exc):  # the API server is down: the pass fails (an outage)
                raise
            report.errors += 1
            if getattr(exc, "status", None) == 403:  # once, not every Workload every pass
                log.error(
                    "not allowed to patch Workloads (%s): expected-start annotations off; "
                    "grant patch on workloads (deploy/k8s/kueue-applier.yaml)",
                    exc,
                )
                self.start_note = False
                return
            log.warning("annotate %s/%s: %s", a.namespace, a.workload, exc)
            return
        if not ok:
            return  # gone meanwhile
        self.noted[(a.namespace, a.workload)] = tuple(a.notes[k] for k in ANNOTATIONS)
        if any(v is not None for v in a.notes.values()):
            report.starts_annotated += 1
        else:
            report.starts_cleared += 1

    def _apply(self, todo: list[Relabel], report: PassReport) -> None:
        """Relabel ``todo``; a patch with no answer (the API server is down) ends the
        pass with that error: the patches not made wait for the next pass."""
        lock = threading.Lock()
        down: list[Exception] = []

        def one(r: Relabel) -> None:
            if down:
                return
            self.bucket.take()
            try:
                ok = self.backend.relabel(r.namespace, r.job_name, r.new_class.name, r.service_s)
            except Exception as exc:  # one bad Job must not stop the pass
                if _no_answer(exc):
                    down.append(exc)
                    return
                with lock:
                    report.errors += 1
                    first_403 = getattr(exc, "status", None) == 403 and not self._told_403
                    self._told_403 |= first_403
                if first_403:  # every Job of every pass would say it: once, loudly
                    log.error(
                        "not allowed to patch Jobs (%s): no Job is relabelled; grant patch "
                        "on batch/v1 jobs (deploy/k8s/kueue-applier.yaml)",
                        exc,
                    )
                elif getattr(exc, "status", None) == 403:
                    log.debug("relabel %s/%s: %s", r.namespace, r.job_name, exc)
                else:
                    log.warning("relabel %s/%s: %s", r.namespace, r.job_name, exc)
                return
            with lock:
                if ok:
                    report.relabelled += 1
                    report.neutral_set += r.service_s is None
                else:
                    report.refused += 1
            if ok:
                log.debug("%s/%s -> %s", r.namespace, r.job_name, r.new_class.name)

        if self.workers == 1 or len(todo) == 1:
            for r in todo:
                one(r)
        else:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="relabel") as pool:
                list(pool.map(one, todo))
        if down:
            raise down[0]


def _no_answer(exc: BaseException) -> bool:
    """The API server did not answer (KubeError status 0: refused, timed out, cut off)."""
    return getattr(exc, "status", None) == 0


def _describe(r: Relabel) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "job": r.job_name,
        "workload": r.workload,
        "job_id": r.job_id,
        "from": r.old_class,
        "to": r.new_class.name,
        "priority": r.new_class.value,
        "expected_service_gpu_s": None if r.service_s is None else round(r.service_s, 1),
    }
