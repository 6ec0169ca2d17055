"""What one pass of the SiteFactor applier did (``--json`` prints it; keys are stable,
new ones are only added)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuhint.slurm.start_comment import comment_counts


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
    pending_unhinted: int = 0  # pending jobs without a hint, at the neutral factor
    neutral_set: int = 0  # of the jobs updated: unhinted ones moved to the neutral factor
    neutral_factor: int | None = None  # None: unhinted jobs left alone (neutral off)
    faded: int = 0  # hinted jobs whose factor is faded towards the neutral one
    hint_age_s: float | None = None  # since the cluster's last sign of life (None: none)
    hints_fresh: bool = True  # the cluster showed life within stale_after_s
    hints_from: str = "redis"  # "cache": Redis failed, the last hints read were used
    start_comment: bool = False  # expected starts written to the jobs' Comment
    comments: dict[str, int] = field(default_factory=lambda: comment_counts(None))

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
            "pending_unhinted": self.pending_unhinted,
            "neutral_set": self.neutral_set,
            "neutral_factor": self.neutral_factor,
            "faded": self.faded,
            "hint_age_s": None if self.hint_age_s is None else round(self.hint_age_s, 1),
            "hints_fresh": self.hints_fresh,
            "hints_from": self.hints_from,
            "start_comment": self.start_comment,
            **self.comments,
        }


class _Update(Protocol):
    @property
    def job_ids(self) -> tuple[str, ...]: ...
    @property
    def site_factor(self) -> int: ...


_FOR_JOB = re.compile(r"for job (\S+)$")


def accepted(updates: Iterable[_Update], errors: Sequence[str]) -> dict[str, int]:
    """Job id -> factor of the updates Slurm took: all but the jobs its error lines name
    (scontrol says ``<why> for job 12`` per job); none when a line names no job of the
    updates (a batch that failed whole, a message not known here): those are sent again
    next pass rather than taken as set.

    >>> class U:  job_ids, site_factor = ("1", "2"), 5
    >>> accepted([U()], ["Invalid job id specified for job 2"])
    {'1': 5}
    >>> accepted([U()], ["slurm_update error: Unable to contact slurm controller"])
    {}
    """
    updates = list(updates)
    ids = {j for u in updates for j in u.job_ids}
    named = set()
    for line in errors:
        m = _FOR_JOB.search(line.strip())
        if m is None or m.group(1) not in ids:
            return {}
        named.add(m.group(1))
    return {j: u.site_factor for u in updates for j in u.job_ids if j not in named}
