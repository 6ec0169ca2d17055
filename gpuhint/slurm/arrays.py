"""Pending job arrays as Slurm keeps them: the tasks not started yet share one job record.

``squeue -r`` lists each pending task (``12_5``) with the record's raw id (``%A``: 12 for
all of them). An ``scontrol update`` that names some tasks of that record one by one
(``jobid=12_3,12_4``) splits each named task off into a record of its own (Slurm 22.05);
naming exactly the tasks the record holds (``jobid=12_[0-2,5-9]``) updates it in place.
So the SiteFactor applier addresses such a record as one job: it has one SiteFactor and
one Comment anyway. It takes the hint (and the expected start) of its lowest task that
has one: Slurm starts a record's tasks in index order, so that task is the next to run.

>>> from gpuhint.slurm.priority import SlurmJob
>>> q = [SlurmJob(f"12_{t}", "PENDING", raw_id="12") for t in (0, 1, 2, 5)]
>>> a = collapse_arrays(q + [SlurmJob("12_3", "PENDING", raw_id="14")])
>>> [j.job_id for j in a.queue], a.spread({"12_1": 7.0})
(['12_3', '12_[0-2,5]'], {'12_1': 7.0, '12_[0-2,5]': 7.0})
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

_V = TypeVar("_V")


class QueuedTask(Protocol):
    """What is read of a queued job (:class:`gpuhint.slurm.priority.SlurmJob`, a dataclass)."""

    @property
    def job_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def raw_id(self) -> str | None: ...


_J = TypeVar("_J", bound=QueuedTask)
_TASK = re.compile(r"^(\d+)_(\d+)$")


def task_ranges(tasks: Iterable[int]) -> str:
    """Task indexes as Slurm writes them: ``0-2,5,7-9``.

    >>> task_ranges([9, 0, 1, 2, 5, 7, 8])
    '0-2,5,7-9'
    """
    out: list[str] = []
    run: list[int] = []
    for t in sorted(set(tasks)):
        if run and t != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(t)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


@dataclass(frozen=True)
class Collapsed(Generic[_J]):
    """A queue with each shared pending array record as one job (``12_[0-2,5-9]``)."""

    queue: list[_J]
    members: dict[str, tuple[str, ...]]
    """Each record's id -> its tasks' ids, lowest index first."""

    def spread(self, values: Mapping[str, _V]) -> dict[str, _V]:
        """``values`` by job id, plus each record's: that of its lowest task with one."""
        out = dict(values)
        for record, tasks in self.members.items():
            first = next((t for t in tasks if t in values), None)
            if first is not None:
                out[record] = values[first]
        return out


def collapse_arrays(queue: Sequence[_J]) -> Collapsed[_J]:
    """Pending tasks that share a record (same array, same raw id; two or more) -> one
    job named ``ARRAY_[tasks]``; every other job as it is."""
    shared: dict[tuple[str, str], list[tuple[int, _J]]] = {}
    for job in queue:
        m = _TASK.match(job.job_id)
        if m and job.raw_id and job.state == "PENDING":
            shared.setdefault((m[1], job.raw_id), []).append((int(m[2]), job))
    members: dict[str, tuple[str, ...]] = {}
    records: list[_J] = []
    for (array_id, _), tasks in shared.items():
        if len(tasks) < 2:
            continue
        tasks.sort(key=lambda t: t[0])
        record = f"{array_id}_[{task_ranges(t for t, _ in tasks)}]"
        members[record] = tuple(job.job_id for _, job in tasks)
        first: Any = tasks[0][1]  # a dataclass: its record, under the record's id
        records.append(dataclasses.replace(first, job_id=record))
    grouped = {t for tasks in members.values() for t in tasks}
    return Collapsed([j for j in queue if j.job_id not in grouped] + records, members)
