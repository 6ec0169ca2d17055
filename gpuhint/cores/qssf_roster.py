"""Retire the jobs a scheduler agent no longer lists (:class:`JobRoster`). Pure.

Job events are edge-triggered: a job whose ``finished`` never arrives (it ended while a
restarted agent had lost its watermark, or its event was lost) would wait, or run, in
its VC's state for ever, holding the expected starts of the jobs behind it and its GPUs
in the forecast. The agent's roster is level-triggered: the jobs it sees not finished.
A job the VC holds that :data:`ROSTER_MISSES` complete rosters in a row leave out is
retired: announced finished with state UNKNOWN and no run time (nothing learned),
through the same path as any other event.

Misses count across the rosters of one ``agent`` (its node name and feeds) only while no
other agent's roster came since that agent's roster before last: two agents publishing
under one cluster name (each listing only its own jobs) retire nothing there, whatever
the order their rosters arrive in; their alternation is reported (``switched_back``).
Which agents sent parts for a VC is also noted in memory (:func:`hear`), rosters skipped
as nothing to reconcile and incomplete ones too. A handover (an agent given another node
name or other feeds: a new identity) costs two rosters more; a restart keeps the
identity (:func:`~gpuhint.cores.job_roster.agent_identity`).

A roster in parts counts only when every part of its epoch arrived (a part lost on the
way, e.g. dropped by a full agent buffer, makes that roster incomplete: no job misses
it). Jobs submitted (or started) after the roster's epoch never miss it. The roster's
bookkeeping lives in the VC's state as plain dicts and tuples (checkpointed with it;
a rolled-back worker ignores them).

>>> from gpuhint.cores.qssf_state import VcState
>>> from gpuhint.wire.contract import JobEvent, JobRoster
>>> from models.history import HistoryEstimator
>>> from gpuhint.cores.qssf_state import PendingJob
>>> st = VcState(model=HistoryEstimator())
>>> ev = JobEvent(phase="submitted", job_id="7", vc="a", num_gpus=1, time=0, submit_time=0)
>>> st.pending["7"] = PendingJob(ev, None)  # what the engine holds for a waiting job
>>> take_part(st, JobRoster(vc="a", epoch=60)).retired        # missed once: not yet
[]
>>> [(e.job_id, e.phase.value, e.state.value)
...  for e in take_part(st, JobRoster(vc="a", epoch=120)).retired]
[('7', 'finished', 'UNKNOWN')]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from gpuhint.wire.contract import JobEvent, JobPhase, JobRoster, JobState

if TYPE_CHECKING:
    from gpuhint.cores.qssf_state import VcState

ROSTER_MISSES = 2
"""Complete rosters in a row that must leave a job out before it is retired: one
absorbs a roster that raced the job's own events (a resend reordered on the way)."""


def nothing_to_reconcile(held: VcState | None, roster: JobRoster, offset: int | None) -> bool:
    """Whether ``roster`` is an empty, whole roster of a VC that holds no job (or is not
    held here at all): applying it would only rewrite the VC's bookkeeping, a changelog
    record per period for every VC the scheduler defines. A redelivery still counts (it
    may have forwards to repeat), and so do miss counts still pending."""
    if roster.job_ids or roster.part != 0 or not roster.last:
        return False
    if held is None:
        return True
    redelivered = offset is not None and offset <= held.applied_offset
    return not (held.pending or held.running or held.roster_missed or redelivered)


class Taken(NamedTuple):
    """What one roster part did: the jobs to retire, and whether its agent took the VC
    back from another one (two agents publishing under one cluster name)."""

    retired: list[JobEvent]
    switched_back: bool = False


def take_part(
    st: VcState, roster: JobRoster, heard: Mapping[str | None, float] = MappingProxyType({})
) -> Taken:
    """Apply one roster part to ``st``; at a complete roster's last part, the ``finished``
    events of the jobs to retire (not yet applied: the engine applies them). ``heard``:
    the latest epoch of any roster part each agent sent for this VC (:func:`hear`)."""
    epoch, parts = st.roster_epoch
    same = roster.epoch == epoch and roster.agent == st.roster_from
    if same and parts < 0:  # that roster is done: a resend of a part
        return Taken([])
    if not same:  # a new roster: the stamps of an unfinished one are void
        st.roster_seen, epoch, parts = {}, roster.epoch, 0
        st.roster_from = roster.agent
    st.roster_epoch = (epoch, parts + 1)
    seen = st.roster_seen
    for job_id in roster.job_ids:
        if job_id in st.pending or job_id in st.running:
            seen[job_id] = None
    if not roster.last:
        return Taken([])
    complete = parts == roster.part  # parts 0 .. part - 1 came before this one
    st.roster_seen, st.roster_epoch = {}, (roster.epoch, -1)  # done: resends ignored
    if not complete:
        return Taken([])
    carried, switched_back = _carried(st, roster.agent, roster.epoch, heard)
    missed: dict[str, int] = {}
    retire: list[str] = []
    if carried is None:  # another agent's rosters are interleaved: none counts
        st.roster_missed = missed
        return Taken([], switched_back)
    for job_id in [*st.pending, *st.running]:
        if job_id in seen or _since(st, job_id) > roster.epoch:
            continue
        n = carried.get(job_id, 0) + 1
        if n >= ROSTER_MISSES:
            retire.append(job_id)
        else:
            missed[job_id] = n
    st.roster_missed = missed
    return Taken([_retired(st, job_id, roster) for job_id in retire], switched_back)


MAX_AGENTS = 8
"""Agents remembered per VC (the most recent); more is a misconfiguration anyway."""


def _carried(
    st: VcState, agent: str | None, epoch: float, heard: Mapping[str | None, float]
) -> tuple[dict[str, int] | None, bool]:
    """The miss counts a complete roster of ``agent`` at ``epoch`` goes on from, or None
    when another agent sent a roster since this one's roster before last (two agents
    under one cluster name, or a handover still settling): each lists only its own
    jobs, so no job misses such a roster. Also whether the other agent's roster came
    since this agent's last one (they alternate: reported)."""
    agents = st.roster_agents
    before_last, last = agents.get(agent, (-math.inf, -math.inf))
    others = {a: t for a, (_, t) in agents.items() if a != agent}
    for a, t in heard.items():
        if a != agent:
            others[a] = max(others.get(a, -math.inf), t)
    agents[agent] = (last, epoch)
    if len(agents) > MAX_AGENTS:
        del agents[min(agents, key=lambda a: agents[a][1])]
    if any(other_last > before_last for other_last in others.values()):
        return None, any(other_last > last > -math.inf for other_last in others.values())
    return st.roster_missed, False


def hear(heard: dict[str | None, float], roster: JobRoster) -> None:
    """Note that ``roster.agent`` sent a part at ``roster.epoch`` (any part, a roster the
    engine skips as nothing to reconcile too): another agent's complete rosters then
    count no miss for a while, even if this agent's own never completes here."""
    heard[roster.agent] = max(heard.get(roster.agent, -math.inf), roster.epoch)
    if len(heard) > MAX_AGENTS:
        del heard[min(heard, key=heard.__getitem__)]


def _since(st: VcState, job_id: str) -> float:
    """When the VC learned of the job: its submit, or (never seen waiting) its start."""
    waiting = st.pending.get(job_id)
    if waiting is not None:
        return waiting.event.submit_time
    run = st.starts.running.get(job_id)
    if run is not None:
        return run.start
    unseen = st.started_unseen.get(job_id)
    return unseen[0] if unseen is not None else float("-inf")


def _retired(st: VcState, job_id: str, roster: JobRoster) -> JobEvent:
    """The ``finished`` event (state UNKNOWN, no run time) that retires ``job_id``."""
    ended = {"phase": JobPhase.FINISHED, "state": JobState.UNKNOWN, "duration_s": None}
    waiting = st.pending.get(job_id)
    if waiting is not None:
        ev = waiting.event
        update = {**ended, "time": max(roster.epoch, ev.time), "start_time": None, "nodes": ()}
        return ev.model_copy(update=update)
    run = st.starts.running.get(job_id)
    start, gpus = (
        (run.start, run.gpus)
        if run is not None
        else st.started_unseen.get(job_id, (roster.epoch, 0))
    )
    return JobEvent(
        phase=JobPhase.FINISHED,
        job_id=job_id,
        cluster=roster.cluster,
        vc=roster.vc,
        num_gpus=gpus,
        time=max(roster.epoch, start),
        submit_time=start,
        start_time=start,
        state=JobState.UNKNOWN,
    )
