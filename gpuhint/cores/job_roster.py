"""A scheduler agent's rosters: the jobs it sees not finished, per VC, as messages.

:meth:`~gpuhint.cores.job_tracker.JobTracker.roster` says which jobs; this splits each
VC's list into :class:`~gpuhint.wire.contract.JobRoster` parts that fit the contract
(at most ``MAX_LIST`` ids and about :data:`PART_BYTES` a part) and says when the next
roster is due. The worker's side is :mod:`gpuhint.cores.qssf_roster`.

>>> parts = roster_parts("c", "a", 60.0, [str(i) for i in range(5000)])
>>> [(p.part, len(p.job_ids), p.last) for p in parts]
[(0, 4096, False), (1, 904, True)]
>>> roster_parts("c", "a", 60.0, [])[0].job_ids
()
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from gpuhint.wire.contract import MAX_LIST, JobRoster

PART_BYTES = 128 * 1024
"""About the most id bytes one part carries: half the worker's default message limit."""

DEFAULT_ROSTER_EVERY_S = 300.0
"""How often an agent publishes its rosters by default (``GPUHINT_AGENT_ROSTER_EVERY_S``):
a job whose end was lost is retired two rosters, 5 to 10 minutes, after it ended."""


def roster_parts(
    cluster: str, vc: str, epoch: float, job_ids: Sequence[str], agent: str | None = None
) -> list[JobRoster]:
    """One VC's roster at ``epoch`` in parts (one part, maybe empty, at least), sent by
    ``agent`` (:func:`agent_identity`)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for job_id in job_ids:
        cost = len(json.dumps(job_id, ensure_ascii=False).encode()) + 1  # as sent, a comma
        if len(chunks[-1]) >= MAX_LIST or (chunks[-1] and size + cost > PART_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(job_id)
        size += cost
    last = len(chunks) - 1
    return [
        JobRoster(
            cluster=cluster,
            vc=vc,
            epoch=epoch,
            part=i,
            last=i == last,
            job_ids=tuple(c),
            agent=agent,
        )
        for i, c in enumerate(chunks)
    ]


def agent_identity(node: str, reads: Sequence[str]) -> str:
    """A roster's ``agent``: the agent's node name (``--node``, stable across restarts
    and pod re-creations) and a digest of what its feeds read (cluster, source, VC
    mapping, the scheduler's address: :meth:`SchedulerFeed.identity`), made a valid
    contract name (no ':', no whitespace, at most 128 characters). An agent restarted
    with the same node name and feeds is the same agent; two agents that read different
    schedulers differ, even on one host.

    >>> agent_identity("gpu-07", ["venus|slurm|squeue"])
    'gpu-07/b13fe4d5'
    >>> agent_identity("odd node:1", [])
    'odd_node_1/e3b0c442'
    """
    digest = hashlib.sha256("\n".join(reads).encode()).hexdigest()[:8]
    name = re.sub(r"[:\s]", "_", node)[:119] or "agent"
    return f"{name}/{digest}"


class RosterClock:
    """When rosters are due: at the first chance, then every ``every_s`` (0: never).

    >>> c = RosterClock(300.0)
    >>> c.due(0.0), c.due(10.0), c.due(300.0)
    (True, False, True)
    """

    def __init__(self, every_s: float = DEFAULT_ROSTER_EVERY_S) -> None:
        self.every_s = every_s
        self.last: float | None = None

    def due(self, now: float) -> bool:
        """Whether a roster is due at ``now``; if so, it counts as sent."""
        if self.every_s <= 0 or (self.last is not None and now - self.last < self.every_s):
            return False
        self.last = now
        return True
