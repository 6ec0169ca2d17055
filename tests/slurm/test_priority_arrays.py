"""Pending job arrays: Slurm keeps the tasks not started yet in one job record, and an
``scontrol update`` naming some of them by id (``12_3,12_4``) splits each named task off
into a record of its own (seen on Slurm 22.05: ``squeue -r -o %i|%A`` then shows a new
raw id per task). The applier must address such a record as a whole (``12_[0-2,5-9]``,
which 22.05 updates in place), else every pass splits every pending array task and a
sweep of 10,000 tasks becomes 10,000 job records (MaxJobCount, 10,000 by default)."""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence

from gpuhint.slurm.commands import SlurmCli
from gpuhint.slurm.priority import FactorMap, PriorityApplier, SlurmJob
from gpuhint.slurm.start_comment import Start, comment_text


class _Slurm:
    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.jobs = jobs
        self.lines: list[str] = []

    def queue(self) -> list[SlurmJob]:
        return self.jobs

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.lines.extend(lines)
        return []


class _Hints:
    def __init__(self, prios: dict[str, float], starts: dict[str, Start]) -> None:
        self.prios, self._starts = prios, starts

    def priorities(self, cluster: str) -> dict[str, float]:
        return self.prios

    def starts(self, cluster: str) -> dict[str, Start]:
        return self._starts


def _queue() -> list[SlurmJob]:
    """What ``squeue -h -r --states=PD -o %i|%A|%Q|%k`` gives for array 12 whose tasks
    3 and 4 were split off earlier, and a plain job 13."""
    cli = _Cli(
        "".join(f"12_{t}|12|100|(null)\n" for t in (0, 1, 2, 5, 6, 7, 8, 9))
        + "12_3|14|100|(null)\n12_4|15|100|(null)\n13|13|100|(null)\n"
    )
    return cli.pending_jobs()


class _Cli(SlurmCli):
    def __init__(self, squeue: str) -> None:
        super().__init__()
        self.squeue = squeue

    def run(self, argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
        return self.squeue if argv[0] == "squeue" else ""


def test_tasks_of_one_pending_record_are_updated_as_one() -> None:
    base = float(calendar.timegm(time.strptime("2026-12-05T12:00", "%Y-%m-%dT%H:%M")))
    prios = {f"12_{t}": 3600.0 * (t + 1) for t in range(10)} | {"13": 60.0}
    starts = {"12_0": Start(base + 600, base, base + 1200, base)}
    slurm = _Slurm(_queue())
    fmap = FactorMap()
    PriorityApplier(slurm, _Hints(prios, starts), "c", fmap, start_comment=True).run_pass()
    ids = [ln.split()[1].removeprefix("jobid=") for ln in slurm.lines]
    named = {i for line_ids in ids for i in line_ids.replace("12_[0-2,5-9]", "").split(",")}
    assert not named & {f"12_{t}" for t in (0, 1, 2, 5, 6, 7, 8, 9)}, slurm.lines
    # the record gets the factor of its first task (the one Slurm starts next) ...
    assert f"update jobid=12_[0-2,5-9] SiteFactor={fmap.factor(3600.0)}" in slurm.lines
    # ... and its expected start; split-off tasks and plain jobs are named as before
    assert f"update jobid=12_[0-2,5-9] Comment={comment_text(starts['12_0'])}" in slurm.lines
    assert f"update jobid=12_3 SiteFactor={fmap.factor(4 * 3600.0)}" in slurm.lines
    assert f"update jobid=13 SiteFactor={fmap.factor(60.0)}" in slurm.lines
