"""The QSSF hint engine's state: what is saved per (cluster, VC), and the engine's counters.

All QSSF state of one (cluster, VC) is one picklable :class:`VcState`, keyed by
:func:`state_key`; :class:`gpuhint.cores.qssf.HintEngine` works on it. These classes are
what the state table's pickles name: they lived in ``gpuhint.cores.qssf`` (and before
that ``gpuhint.core``), and :mod:`gpuhint.wire.pickles` maps both old paths here.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from gpuhint.cores.start_forecast import StartBook
from gpuhint.wire.contract import JobEvent, PriorityHint
from models.base import DurationModel
from models.fifo_guard import FifoGuard
from models.pending_index import PendingIndex
from models.wait_bound import WaitBound


def state_key(cluster: str, vc: str) -> str:
    """Key of a VC's state: ``topics.job_key`` as text (``cluster/vc``), a ``/`` or ``\\``
    in a name escaped, so that ("a/b", "c") and ("a", "b/c") keep states of their own
    (names without them keep the keys they always had; the partition is the message's).

    >>> state_key("venus", "vc1"), state_key("a/b", "c"), state_key("a", "b/c")
    ('venus/vc1', 'a\\\\/b/c', 'a/b\\\\/c')
    """
    return f"{_escaped(cluster)}/{_escaped(vc)}"


def _escaped(name: str) -> str:
    if "/" not in name and "\\" not in name:
        return name
    return name.replace("\\", "\\\\").replace("/", "\\/")


class PendingJob:
    """A waiting job: its submitted event and the hint last published for it.

    Pickled as the two messages' JSON, serialized once and kept until the hint changes:
    a VC's state is saved every second or so with all its waiting jobs, and pickling
    pydantic objects field by field cost ~2x more each time.

    >>> import pickle
    >>> ev = JobEvent(phase="submitted", job_id="1", num_gpus=1, time=0, submit_time=0)
    >>> h = PriorityHint(job_id="1", num_gpus=1, submit_time=0, predicted_duration_s=5,
    ...     priority=5, model="m", model_version="1", created_at=0)
    >>> job = pickle.loads(pickle.dumps(PendingJob(ev, h)))
    >>> job.event == ev and job.hint == h and job.priority == 5
    True
    """

    __slots__ = ("_blob", "_hint", "event")

    def __init__(self, event: JobEvent, hint: PriorityHint) -> None:
        self.event = event
        self._hint = hint
        self._blob: tuple[bytes, bytes] | None = None

    @property
    def hint(self) -> PriorityHint:
        return self._hint

    @hint.setter
    def hint(self, hint: PriorityHint) -> None:
        self._hint = hint
        self._blob = None

    @property
    def priority(self) -> float:
        return self._hint.priority

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingJob):
            return NotImplemented
        return self.event == other.event and self._hint == other._hint

    def __repr__(self) -> str:
        return f"PendingJob(event={self.event!r}, hint={self._hint!r})"

    def __setstate__(self, state: dict[str, object]) -> None:
        """Pickles of before :meth:`__reduce__` (a dataclass: ``event`` and ``hint``)."""
        self.event = state["event"]  # type: ignore[assignment]
        self._hint = state["hint"]  # type: ignore[assignment]
        self._blob = None

    def __reduce__(self) -> tuple[object, tuple[bytes, bytes]]:
        if self._blob is None:
            self._blob = (
                self.event.model_dump_json().encode(),
                self._hint.model_dump_json().encode(),
            )
        return (_pending_job, self._blob)


def _pending_job(event: bytes, hint: bytes) -> PendingJob:
    """Rebuild a :class:`PendingJob` from its pickled JSON (validated as on the wire)."""
    job = PendingJob(JobEvent.model_validate_json(event), PriorityHint.model_validate_json(hint))
    job._blob = (event, hint)
    return job


_FRONT_SINCE = "bound_promoted_at"
"""The pickled state's key of the starvation bound's promotion times."""

RECENT_FINISHED_MAX = 4096
"""How many finished job ids each VC remembers (:attr:`VcState.recent_finished`), to
recognise a producer's resend of any phase of a finished job. A resend that arrives
after this many later finishes of its VC is applied again (learned twice). A full
memory adds 45-145 KB to the VC's pickled state (Slurm-like to Philly-like ids), about
10 KB once compressed as the state table stores it."""


@dataclass
class VcState:
    """All QSSF state of one (cluster, VC): pure and picklable.

    ``applied_offset`` is the highest input offset applied (a VC lives on one
    partition); -1 before any, and untouched by events that carry no offset.

    Pickles of before a field existed load with that field's default (:meth:`__setstate__`).
    """

    model: DurationModel
    pending: dict[str, PendingJob] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    """Started jobs' predicted durations, to score the prediction at finish."""
    applied_offset: int = -1
    index: PendingIndex = field(default_factory=PendingIndex)
    """Waiting jobs by the history keys their prediction depends on (hint updates)."""
    model_priority: dict[str, float] = field(default_factory=dict)
    """The model's current priority of each waiting job (the published one differs
    while the FIFO guard has fallen back)."""
    guard: FifoGuard = field(default_factory=FifoGuard)
    running_gpus: int = 0
    recent_finished: dict[str, None] = field(default_factory=dict)
    """The VC's last :data:`RECENT_FINISHED_MAX` finished job ids, oldest first (an LRU):
    a resent event of one of these jobs changes nothing."""
    starts: StartBook = field(default_factory=StartBook)
    """Running jobs, capacity and recent arrivals: the expected-start forecast's input."""
    bound: WaitBound = field(default_factory=WaitBound)
    """The starvation bound: waiting jobs' wait limits, and which are overdue."""
    submit_point: dict[str, float] = field(default_factory=dict)
    """Each waiting job's point forecast at submit: what is scored when it finishes
    (its hint's ``predicted_duration_s`` moves with hint updates)."""
    roster_epoch: tuple[float, int] = (float("-inf"), 0)
    """The roster being received (:mod:`gpuhint.cores.qssf_roster`): its epoch, parts seen."""
    roster_from: str | None = None
    """The agent that sent the roster being received (its parts go together)."""
    roster_agents: dict[str | None, tuple[float, float]] = field(default_factory=dict)
    """Agents that sent complete rosters here -> the epochs of their last two (misses
    count only while one agent's rosters come alone)."""
    roster_seen: dict[str, None] = field(default_factory=dict)
    """Jobs held here that the roster being received lists."""
    roster_missed: dict[str, int] = field(default_factory=dict)
    """Jobs held here that the last complete rosters left out: how many in a row."""
    roster_retired: tuple[int, tuple[bytes, ...]] = (-1, ())
    """The input offset of the last roster part that retired jobs, and their encoded
    ``finished`` events (a redelivery of that part forwards them again)."""
    started_unseen: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Running jobs never seen waiting (no start-book entry): their start and GPUs."""

    def __getstate__(self) -> dict[str, object]:
        # the bound's promotion times ride beside it: its own pickle stays the five
        # fields an older worker reads (a rollback loads this state, and ignores them)
        return {**self.__dict__, _FRONT_SINCE: self.bound.promoted_at}

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickle, filling the fields that a pickle of before lacks."""
        state = dict(state)
        front_since = state.pop(_FRONT_SINCE, None)
        self.__dict__.update(state)
        for f in fields(self):
            if f.name in state:
                continue
            if f.default_factory is not MISSING:
                setattr(self, f.name, f.default_factory())
            elif f.default is not MISSING:
                setattr(self, f.name, f.default)
        if "bound" not in state:  # the jobs waiting then are bounded like later ones
            self.track_waiting()
        if isinstance(front_since, dict):
            self.bound.promoted_at = front_since

    def track_waiting(self) -> None:
        """Put every waiting job under the starvation bound (after it was turned on)."""
        self.bound.track({j: p.event.submit_time for j, p in self.pending.items()})

    def remember_finished(self, job_id: str) -> None:
        """Add (or refresh) a finished job id, forgetting the oldest beyond the cap."""
        recent = self.recent_finished
        recent.pop(job_id, None)
        recent[job_id] = None
        while len(recent) > RECENT_FINISHED_MAX:
            del recent[next(iter(recent))]


@dataclass
class EngineStats:
    """Counters a user wants to see: what went through, and how good predictions were."""

    events: int = 0
    submitted: int = 0
    started: int = 0
    finished: int = 0
    hints_written: int = 0
    hints_removed: int = 0
    """Removal requests: one per started and per finished event (idempotent in the store)."""
    learned: int = 0
    scored: int = 0
    hints_updated: int = 0
    """Waiting jobs whose priority moved (a job they bear on finished, or overdue)."""
    overdue: int = 0
    """Waiting jobs the starvation bound moved to the front (``wait_bound:overdue``)."""
    redelivered: int = 0
    """Events at or below their VC's offset watermark: re-emitted, not re-applied."""
    rosters: int = 0
    """Roster parts applied (redelivered ones not counted)."""
    retired: int = 0
    """Jobs retired as finished (UNKNOWN) because the agent's rosters left them out."""
    roster_switchbacks: int = 0
    """Complete rosters whose agent took a VC back from another one: two agents publish
    under one cluster name (neither retires anything there)."""
    duplicates: int = 0
    """Resent events (a new offset, a phase its job already went through): re-emitted,
    not re-applied. Not counted in ``submitted`` / ``started`` / ``finished``."""
    abs_log_error_sum: float = 0.0
    abs_pct_errors: list[float] = field(default_factory=list)

    @property
    def mae_log(self) -> float | None:
        return self.abs_log_error_sum / self.scored if self.scored else None

    @property
    def median_abs_pct_error(self) -> float | None:
        if not self.abs_pct_errors:
            return None
        xs = sorted(self.abs_pct_errors)
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
