"""The in-memory twin of a Kueue cluster, for pure tests of the applier.

It keeps one Job per Workload and mimics what Kueue does with a priority-class label: the
Workload's priority becomes the class's value. Relabelling a Job that is no longer
suspended is refused, as the API server refuses the applier's guarded patch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuhint.kueue.errors import KubeError
from gpuhint.kueue.policy import ClassLadder, QueuePolicy, WorkloadView


@dataclass
class _Job:
    view: WorkloadView
    suspended: bool = True

    @property
    def job_class(self) -> str | None:
        return self.view.job_class


class InMemoryKueue:
    def __init__(self, queues: list[QueuePolicy] | None = None) -> None:
        self.jobs: dict[str, _Job] = {}
        self.cluster_queues = list(queues or [])
        self.classes: dict[str, int] = {}
        self.patches = 0
        self.annotations = 0  # Workload annotation patches

    def add_job(
        self,
        namespace: str,
        name: str,
        *,
        job_id: str,
        cluster_queue: str | None = "cq",
        job_class: str | None = None,
        priority: int = 0,
        admitted: bool = False,
    ) -> None:
        view = WorkloadView(
            namespace=namespace,
            name=f"job-{name}",
            job_name=name,
            job_id=job_id,
            cluster_queue=cluster_queue,
            job_class=job_class,
            priority=priority,
            pending=not admitted,
        )
        self.jobs[f"{namespace}/{name}"] = _Job(view, suspended=not admitted)

    def admit(self, namespace: str, name: str) -> None:
        job = self.jobs[f"{namespace}/{name}"]
        job.view = replace(job.view, pending=False)
        job.suspended = False

    def finish(self, namespace: str, name: str) -> None:
        """The Job ran to its end: its Workload is kept (as while the Job exists), not
        waiting, and holds no quota any more (nothing to preempt)."""
        job = self.jobs[f"{namespace}/{name}"]
        job.view = replace(job.view, pending=False, holds_quota=False)
        job.suspended = False

    def views(self) -> list[WorkloadView]:
        return [j.view for j in self.jobs.values()]

    def queues(self) -> list[QueuePolicy]:
        return list(self.cluster_queues)

    def relabel(self, namespace: str, job: str, class_name: str, service_s: float | None) -> bool:
        j = self.jobs.get(f"{namespace}/{job}")
        if j is None or not j.suspended:
            return False
        self.patches += 1
        j.view = replace(
            j.view, job_class=class_name, priority=self.classes.get(class_name, j.view.priority)
        )
        return True

    def unlabel(self, namespace: str, job: str) -> bool:
        """Remove the class of a suspended Job: Kueue's default priority (0) again."""
        j = self.jobs.get(f"{namespace}/{job}")
        if j is None or not j.suspended:
            return False
        self.patches += 1
        j.view = replace(j.view, job_class=None, priority=0)
        return True

    def annotate(self, namespace: str, workload: str, notes: dict[str, str | None]) -> bool:
        """Like the API server's merge patch of a Workload's annotations (None: remove)."""
        from gpuhint.kueue.start_note import ANNOTATIONS

        for j in self.jobs.values():
            if (j.view.namespace, j.view.name) == (namespace, workload):
                now = dict(zip(ANNOTATIONS, j.view.notes, strict=True))
                now.update({k: v for k, v in notes.items() if k in now})
                j.view = replace(j.view, notes=tuple(now[k] for k in ANNOTATIONS))
                self.annotations += 1
                return True
        return False

    def ensure_classes(self, ladder: ClassLadder, dry_run: bool = False) -> list[str]:
        changed = [c.name for c in ladder.all() if self.classes.get(c.name) != c.value]
        if not dry_run:
            self.classes.update({c.name: c.value for c in ladder.all()})
        return changed


class UnreachableAtFirst(InMemoryKueue):
    """The twin behind an API server that does not answer its first ``down`` calls
    (class creation, watches: each a :class:`KubeError` with status 0, as the real client
    raises when refused), then answers: an outage at start to test a daemon against."""

    def __init__(self, down: int, queues: list[QueuePolicy] | None = None) -> None:
        super().__init__(queues)
        self.down = down
        self.watches = 0

    def _answer(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise KubeError(0, "GET /apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses: refused")

    def ensure_classes(self, ladder: ClassLadder, dry_run: bool = False) -> list[str]:
        self._answer()
        return super().ensure_classes(ladder, dry_run)

    def watch(self, stop: Any) -> None:
        self._answer()
        self.watches += 1
