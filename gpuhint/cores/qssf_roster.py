"""Retire the jobs a scheduler agent no longer lists (:class:`JobRoster`). Pure.

Job events are edge-triggered: a job whose ``finished`` never arrives (it ended while a
restarted agent had lost its watermark, or its event was lost) would wait, or run, in
its VC's state for ever, holding the expected starts of the jobs behind it and its GPUs
in the forecast. The agent's roster is level-triggered: the jobs it sees not finished.
A job the VC holds that :data:`ROSTER_MISSES` complete rosters in a row leave out is
retired: announced finished with state UNKNOWN and no run time (nothing learned),
through the same path as any other event.

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
>>> take_part(st, JobRoster(vc="a", epoch=60))        # missed once: not yet
[]
>>> [(e.job_id, e.phase.value, e.state.value) for e in take_part(st, JobRoster(vc="a", epoch=120))]
[('7', 'finished', 'UNKNOWN')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def take_part(st: VcState, roster: JobRoster) -> list[JobEvent]:
    """Apply one roster part to ``st``; at a complete roster's last part, the ``finished``
    events of the jobs to retire (not yet applied: the engine applies them)."""
    epoch, parts = st.roster_epoch
    if roster.epoch == epoch and parts < 0:  # that roster is done: a resend of a part
        return []
    if roster.epoch != epoch:  # a new roster: the stamps of an unfinished one are void
        st.roster_seen, epoch, parts = {}, roster.epoch, 0
    st.roster_epoch = (epoch, parts + 1)
    seen = st.roster_seen
    for job_id in roster.job_ids:
        if job_id in st.pending or job_id in st.running:
            seen[job_id] = None
    if not roster.last:
        return []
    complete = parts == roster.part  # parts 0 .. part - 1 came before this one
    st.roster_seen, st.roster_epoch = {}, (roster.epoch, -1)  # done: resends ignored
    if not complete:
        return []
    missed: dict[str, int] = {}
    retire: list[str] = []
    for job_id in [*st.pending, *st.running]:
        if job_id in seen or _since(st, job_id) > roster.epoch:
            continue
        n = st.roster_missed.get(job_id, 0) + 1
        if n >= ROSTER_MISSES:
            retire.append(job_id)
        else:
            missed[job_id] = n
    st.roster_missed = missed
    return [_retired(st, job_id, roster) for job_id in retire]


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
