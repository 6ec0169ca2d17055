"""One applier pass: read hints and the cached cluster, relabel what changed, rate-limited.

>>> from gpuhint.kueue.memory import InMemoryKueue
>>> from gpuhint.kueue.hints import MemoryHints
>>> from gpuhint.contract import PriorityHint
>>> kueue = InMemoryKueue()
>>> kueue.add_job("ml", "small", job_id="j1", cluster_queue="cq")
>>> hint = PriorityHint(job_id="j1", cluster="c", num_gpus=1, submit_time=0,
...     predicted_duration_s=60, priority=60, model="m", model_version="1", created_at=0)
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

from gpuhint.kueue.hints import HintReader
from gpuhint.kueue.policy import ClassLadder, QueuePolicy, Relabel, WorkloadView, plan

log = logging.getLogger("gpuhint.kueue")


class KueueBackend(Protocol):
    """What a pass needs of a cluster (:class:`~gpuhint.kueue.kube.KubeKueue` or the twin)."""

    def views(self) -> list[WorkloadView]: ...
    def queues(self) -> list[QueuePolicy]: ...
    def relabel(self, namespace: str, job: str, class_name: str, service_s: float) -> bool: ...
    def ensure_classes(self, ladder: ClassLadder, dry_run: bool = False) -> list[str]: ...


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Applier:
    """Hints -> WorkloadPriorityClass labels on the waiting Jobs of one gpuhint cluster."""

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
    ) -> None:
        self.backend = backend
        self.hints = hints
        self.cluster = cluster
        self.ladder = ladder or ClassLadder()
        self.dry_run = dry_run
        self.workers = max(1, workers)
        self.bucket = bucket or TokenBucket(rate, burst)

    def ensure_classes(self) -> list[str]:
        return self.backend.ensure_classes(self.ladder, self.dry_run)

    def run_pass(self) -> PassReport:
        t0 = time.perf_counter()
        hints = self.hints.pending_hints(self.cluster)
        services = {h.job_id: h.priority for h in hints}
        views = self.backend.views()
        p = plan(views, services, self.ladder, self.backend.queues())
        report = PassReport(
            workloads=len(views),
            pending=sum(1 for v in views if v.pending),
            hints=len(services),
            unchanged=p.unchanged,
            skipped=dict(p.skipped),
            dry_run=self.dry_run,
        )
        if self.dry_run:
            report.planned = [_describe(r) for r in p.relabel]
        elif p.relabel:
            self._apply(p.relabel, report)
        report.seconds = time.perf_counter() - t0
        return report

    def _apply(self, todo: list[Relabel], report: PassReport) -> None:
        lock = threading.Lock()

        def one(r: Relabel) -> None:
            self.bucket.take()
            try:
                ok = self.backend.relabel(r.namespace, r.job_name, r.new_class.name, r.service_s)
            except Exception as exc:  # one bad Job must not stop the pass
                log.warning("relabel %s/%s: %s", r.namespace, r.job_name, exc)
                with lock:
                    report.errors += 1
                return
            with lock:
                if ok:
                    report.relabelled += 1
                else:
                    report.refused += 1
            if ok:
                log.debug("%s/%s -> %s", r.namespace, r.job_name, r.new_class.name)

        if self.workers == 1 or len(todo) == 1:
            for r in todo:
                one(r)
            return
        with ThreadPoolExecutor(self.workers, thread_name_prefix="relabel") as pool:
            list(pool.map(one, todo))


def _describe(r: Relabel) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "job": r.job_name,
        "workload": r.workload,
        "job_id": r.job_id,
        "from": r.old_class,
        "to": r.new_class.name,
        "priority": r.new_class.value,
        "expected_service_gpu_s": round(r.service_s, 1),
    }
