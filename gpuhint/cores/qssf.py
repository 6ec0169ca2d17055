"""The QSSF hint core: job events in, priority hints out. No I/O of its own.

The embedded ``gpuhint demo``, ``gpuhint evaluate`` and the Faust worker all drive this
same class; they differ only in where events come from, which store they pass and
where the per-VC state mapping lives (a dict, or a changelog-backed Faust table).

All QSSF state of one (cluster, VC) is one picklable :class:`VcState`, keyed by
``topics.job_key(cluster, vc)``: that VC's own duration model (nothing is shared across
VCs), its waiting jobs, and the offset watermark. A VC's events live on one Kafka
partition, so its state moves with that partition and any number of workers gives the
same answer as one.

* ``submitted``: predict duration, write a :class:`PriorityHint` (priority = GPUs x the
  model's *expected* duration, ``DurationPrediction.expected_s``: the mean, not the point
  forecast, since QSSF minimizes mean JCT under uncertainty; see docs/qssf.md).
* ``started``:   remove the hint (the scheduler has placed the job); the job's running
  time now counts as evidence about its burst's waiting siblings.
* ``finished``:  remove the hint, learn from the true duration, score the prediction,
  then **update the hints of the waiting jobs it bears on** (hint updates, below).

Hint updates (QSSF semantics, the same code in the worker and the embedded core): a
VC's waiting jobs are indexed by the history keys their prediction depends on
(:class:`models.pending_index.PendingIndex`: burst, name template, user+GPUs). When a
job finishes, the model learns from it and re-predicts (``expected_one``, pure and
cheap) at most ``max_updates`` waiting jobs that share one of its keys, most specific
key first, plus the waiting jobs of ``refresh`` more bursts taken round-robin (their
running siblings' time so far is evidence that grows without any event of theirs). A
moved priority is written with ``HintStore.update_hint`` (a new score in the VC's
sorted set and a ``hint_updated`` change). Work per event is bounded by
``max_updates * (1 + refresh / 4)`` predictions.

Never worse than FIFO: each VC's :class:`models.fifo_guard.FifoGuard` replays its recent
jobs by the model's priorities and by arrival order (a shadow simulation); while the
hints lose to FIFO there, the VC's hints follow arrival order (priority = submit time)
and say so in their reasons (``fifo_guard:fallback``); when the guard changes state,
every waiting hint of the VC is republished.

Starvation bound: each VC's :class:`models.wait_bound.WaitBound` (``wait_bound``, the
factor; 0: off) moves the oldest job that has waited longer than ``factor`` x the
longest wait arrival order would have given in the VC so far (the guard's
:class:`models.fifo_guard.FifoShadow`) to the front, one at a time (priority below
0.001, reason ``wait_bound:overdue``).

One estimate per hint: a moved hint's priority, ``expected_duration_s``, point forecast,
band and first reason are rewritten together (:func:`models.hint_estimate.rescaled`);
the prediction is scored on the submit-time point forecast.

Idempotent redelivery: an event whose input ``offset`` is at or below its VC's
``applied_offset`` was already applied (a crash after the state was saved but before
the offset was committed). It changes no state; its store writes are re-emitted from
the current state (they are idempotent), so the store converges to the state.

Exactly once per (job, phase): a producer's resend is a new record (a new offset) that
the watermark does not catch. A ``submitted`` of a job already waiting, running or
recently finished, a ``started`` of a job running or recently finished and a
``finished`` of a job recently finished (the VC's last :data:`RECENT_FINISHED_MAX`
finished ids, :attr:`VcState.recent_finished`) change no state either: counted as
``EngineStats.duplicates``, their job's current store writes re-emitted. A ``finished``
of a job never seen (a replay that starts mid-way) is learned, once.

>>> from gpuhint.cores.sink import InMemoryStore
>>> from models.history import HistoryEstimator
>>> from gpuhint.wire.contract import JobEvent
>>> store = InMemoryStore()
>>> engine = HintEngine(HistoryEstimator, store)
>>> hint = engine.on_job_event(
...     JobEvent(phase="submitted", job_id="7", num_gpus=4, time=0, submit_time=0))
>>> _ = store.flush(); store.queue("default", "default")
[('7', 14400.0)]
>>> sorted(engine.states), list(engine.states["default/default"].pending)
(['default/default'], ['7'])
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import MISSING, dataclass, field, fields

from gpuhint.cores.sink import HintStore
from gpuhint.cores.start_forecast import StartBook, forecast_vc
from gpuhint.wire.contract import FeatureContribution, JobEvent, JobPhase, PriorityHint
from models.base import DurationModel
from models.fifo_guard import FifoGuard
from models.hint_estimate import OVERRIDE_TAGS, overdue_priority, rescaled
from models.pending_index import PendingIndex
from models.wait_bound import DEFAULT_WAIT_BOUND, WaitBound


def _related_keys(model: DurationModel, ev: JobEvent) -> tuple[str, ...]:
    """The model's keys for the waiting-job index (none for a model without them)."""
    f = getattr(model, "related_keys", None)
    return tuple(f(ev)) if f is not None else ()


def _observe_start(model: DurationModel, ev: JobEvent) -> None:
    f = getattr(model, "observe_start", None)
    if f is not None:
        f(ev)


def state_key(cluster: str, vc: str) -> str:
    """Key of a VC's state: ``topics.job_key`` as text (``cluster/vc``).

    >>> state_key("venus", "vc1")
    'venus/vc1'
    """
    return f"{cluster}/{vc}"


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

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickle, filling the fields that a pickle of before lacks."""
        self.__dict__.update(state)
        for f in fields(self):
            if f.name in state:
                continue
            if f.default_factory is not MISSING:
                setattr(self, f.name, f.default_factory())
            elif f.default is not MISSING:
                setattr(self, f.name, f.default)

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


class HintEngine:
    """Drives one duration model per (cluster, VC) over job events; writes hints to a store.

    ``model_factory`` makes a fresh model for a VC seen for the first time. ``states``
    maps :func:`state_key` to :class:`VcState`; the engine assigns a VC's state back
    after every change (``states[key] = state``), which is how a table-backed mapping
    learns which keys are dirty.
    """

    def __init__(
        self,
        model_factory: Callable[[], DurationModel],
        store: HintStore,
        states: MutableMapping[str, VcState] | None = None,
        clock: Callable[[], float] = time.time,
        keep_pct_errors: int = 100_000,
        max_updates: int = 64,
        refresh: int = 4,
        start_every_s: float = 300.0,
        start_limit: int = 32,
        wait_bound: float = DEFAULT_WAIT_BOUND,
    ) -> None:
        self.model_factory = model_factory
        self.wait_bound = wait_bound
        """The starvation bound's factor (:class:`models.wait_bound.WaitBound`; 0: off)."""
        self.start_every_s = start_every_s
        """A VC's expected starts are re-forecast at most this often (event time; 0: off)."""
        self.start_limit = start_limit
        """...for its first this many waiting jobs (the work per forecast is bounded)."""
        self.max_updates = max_updates
        self.refresh = refresh
        self._reemitted: set[str] = set()
        self.updates: list[PriorityHint] = []
        """The hint updates written while processing the last event."""
        self.store = store
        self.states: MutableMapping[str, VcState] = states if states is not None else {}
        self.clock = clock
        self.stats = EngineStats()
        self.keep_pct_errors = keep_pct_errors

    def state(self, cluster: str, vc: str) -> VcState:
        """The VC's state, created (with a fresh model) on first use."""
        key = state_key(cluster, vc)
        st = self.states.get(key)
        if st is None:
            st = VcState(model=self.model_factory(), bound=WaitBound(self.wait_bound))
            self.states[key] = st
        elif st.bound.factor != self.wait_bound:  # a state saved under another setting
            st.bound.factor = self.wait_bound
        return st

    @staticmethod
    def make_hint(model: DurationModel, ev: JobEvent, created_at: float) -> PriorityHint:
        pred = model.predict(ev)
        # one validation of the whole hint, reasons included (not one per reason)
        return PriorityHint.model_validate(
            {
                "job_id": ev.job_id,
                "cluster": ev.cluster,
                "vc": ev.vc,
                "user": ev.user,
                "num_gpus": ev.num_gpus,
                "submit_time": ev.submit_time,
                "predicted_duration_s": pred.duration_s,
                "priority": max(ev.num_gpus, 1) * pred.expected_s,
                "duration_p10_s": pred.p10_s,
                "duration_p90_s": pred.p90_s,
                "log_duration_std": pred.log_std,
                "model": model.name,
                "model_version": model.version,
                "reasons": tuple({"feature": f, "contribution": c} for f, c in pred.reasons[:5]),
                "created_at": created_at,
                "expected_duration_s": pred.expected_s,
            }
        )

    def on_job_event(self, ev: JobEvent, offset: int | None = None) -> PriorityHint | None:
        """Process one event (``offset``: its input offset, if any); return the hint
        written, if any (for a redelivered submit: the hint re-emitted)."""
        s = self.stats
        s.events += 1
        self.updates = []
        st = self.state(ev.cluster, ev.vc)
        if offset is not None and offset <= st.applied_offset:
            return self._reemit(st, ev)
        if self._is_duplicate(st, ev):
            s.duplicates += 1
            if ev.job_id in st.recent_finished:
                st.remember_finished(ev.job_id)  # an LRU: a hit is recent again
            hint = self._reemit_job(st, ev)
        else:
            waiting = st.pending.get(ev.job_id)
            hint = self._apply(st, ev)
            self._track_starts(st, ev, waiting, hint)
        if st.bound.heap:
            self._enforce_bound(st, ev.time)
        if offset is not None:
            st.applied_offset = offset
        self.states[state_key(ev.cluster, ev.vc)] = st  # mark dirty
        return hint

    def _track_starts(
        self, st: VcState, ev: JobEvent, waiting: PendingJob | None, hint: PriorityHint | None
    ) -> None:
        """Feed the VC's start book; re-forecast its expected starts when due."""
        book = st.starts
        if ev.phase is JobPhase.SUBMITTED and hint is not None:
            book.arrived(ev.time, hint.priority)
        elif ev.phase is JobPhase.STARTED and waiting is not None:
            h = waiting.hint
            pred = h.predicted_duration_s
            book.started(
                ev.job_id,
                start=ev.time,
                gpus=ev.num_gpus,
                expected=pred,
                low=pred if h.duration_p10_s is None else h.duration_p10_s,
                high=pred if h.duration_p90_s is None else h.duration_p90_s,
            )
        elif ev.phase is JobPhase.FINISHED:
            book.finished(ev.job_id)
        book.capacity = max(book.capacity, st.running_gpus)
        if (
            self.start_every_s > 0
            and st.pending
            and ev.time >= book.published_at + self.start_every_s
        ):
            self.store.put_starts(
                forecast_vc(
                    book,
                    st.pending.values(),
                    ev.cluster,
                    ev.vc,
                    ev.time,
                    self.start_limit,
                    st.running_gpus,
                )
            )
            book.published_at = ev.time

    @staticmethod
    def _is_duplicate(st: VcState, ev: JobEvent) -> bool:
        """Whether the job already went through this phase (a producer's resend): a
        submit of a job waiting, running or recently finished; a start of a job running
        or recently finished; a finish of a job recently finished."""
        jid = ev.job_id
        if jid in st.recent_finished:
            return True
        if ev.phase is JobPhase.SUBMITTED:
            return jid in st.pending or jid in st.running
        if ev.phase is JobPhase.STARTED:
            return jid in st.running
        return False

    def _apply(self, st: VcState, ev: JobEvent) -> PriorityHint | None:
        s = self.stats
        if ev.phase is JobPhase.SUBMITTED:
            s.submitted += 1
            hint = self.make_hint(st.model, ev, self.clock())
            st.model_priority[ev.job_id] = hint.priority
            st.submit_point[ev.job_id] = hint.predicted_duration_s
            st.guard.submit(ev.job_id, hint.priority, ev.submit_time, ev.num_gpus)
            st.bound.submit(ev.job_id, ev.submit_time)
            if st.guard.fallback:
                hint = self._published(st, hint, ev, hint.priority)
            self.store.put_hint(hint)
            st.pending[ev.job_id] = PendingJob(ev, hint)
            st.index.add(ev.job_id, _related_keys(st.model, ev))
            s.hints_written += 1
            return hint
        self.store.remove_hint(ev.cluster, ev.vc, ev.job_id)
        s.hints_removed += 1
        if ev.phase is JobPhase.STARTED:
            s.started += 1
            st.bound.started(ev.job_id)
            job = st.pending.pop(ev.job_id, None)
            if job is not None:
                point = st.submit_point.pop(ev.job_id, job.hint.predicted_duration_s)
                st.running[ev.job_id] = point
                st.index.remove(ev.job_id)
                st.model_priority.pop(ev.job_id, None)
                _observe_start(st.model, ev)
                st.running_gpus += ev.num_gpus
            return None
        s.finished += 1
        job = st.pending.pop(ev.job_id, None)
        was_running = ev.job_id in st.running
        predicted = st.running.pop(ev.job_id, None)
        if job is not None:
            predicted = st.submit_point.pop(ev.job_id, job.hint.predicted_duration_s)
            st.index.remove(ev.job_id)
            st.model_priority.pop(ev.job_id, None)
            st.bound.forget(ev.job_id)
        if ev.duration_s is not None:
            if predicted is not None:
                s.scored += 1
                s.abs_log_error_sum += abs(math.log1p(predicted) - math.log1p(ev.duration_s))
                if ev.duration_s > 0 and len(s.abs_pct_errors) < self.keep_pct_errors:
                    s.abs_pct_errors.append(abs(predicted - ev.duration_s) / ev.duration_s)
            keys = _related_keys(st.model, ev)
            st.model.learn(ev, ev.duration_s)
            s.learned += 1
            running = st.running_gpus if was_running else st.running_gpus + ev.num_gpus
            flipped = st.guard.observe(ev.job_id, ev.duration_s, running)
            st.bound.scale = st.guard.shadow.max_wait
            self._rerank(st, ev.time, keys, everyone=flipped)
        if was_running:
            st.running_gpus = max(0, st.running_gpus - ev.num_gpus)
        st.remember_finished(ev.job_id)
        return None

    def _rerank(self, st: VcState, now: float, keys: tuple[str, ...], everyone: bool) -> None:
        """Re-predict the waiting jobs a finished job bears on; write those that moved."""
        if not st.pending:
            return
        if everyone:  # the FIFO guard changed state: republish the whole VC
            ids = list(st.pending)
        else:
            ids = st.index.related(keys, self.max_updates)
            if self.refresh:
                seen = set(ids)
                for key in st.index.rotate(self.refresh):
                    for jid in st.index.waiting(key, max(1, self.max_updates // 4)):
                        if jid not in seen:
                            seen.add(jid)
                            ids.append(jid)
        expected = getattr(st.model, "expected_one", None)
        if expected is None:  # a model without River's conventions: nothing to re-rank by
            return
        for jid in ids:
            job = st.pending.get(jid)
            if job is None:
                continue
            ev = job.event
            mp = max(ev.num_gpus, 1) * expected(ev, now)
            st.model_priority[jid] = mp
            st.guard.reprioritize(jid, mp)
            hint = self._published(st, job.hint, ev, mp)
            if hint is job.hint or hint.priority == job.hint.priority:
                continue
            job.hint = hint
            self.store.update_hint(hint)
            self.updates.append(hint)
            self.stats.hints_updated += 1

    def _enforce_bound(self, st: VcState, now: float) -> None:
        """Move the oldest waiting job whose wait passed the VC's limit by ``now`` to
        the front, while no other is there (one update per event at most)."""
        for jid in st.bound.due(now):
            job = st.pending.get(jid)
            if job is None:  # not waiting here (cannot happen): free the front
                st.bound.forget(jid)
                continue
            mp = st.model_priority.get(jid, job.hint.priority)
            hint = self._published(st, job.hint, job.event, mp)
            if hint is job.hint:
                continue
            job.hint = hint
            self.store.update_hint(hint)
            self.updates.append(hint)
            self.stats.hints_updated += 1
            self.stats.overdue += 1

    def _published(
        self, st: VcState, hint: PriorityHint, ev: JobEvent, model_priority: float
    ) -> PriorityHint:
        """The hint as published, one estimate throughout: the model's priority (GPUs x
        expected duration), with the point forecast and band moved by the same ratio as
        the expected duration; or a priority below 0.001 once the job is overdue
        (starvation bound, arrival order among the overdue);
        or arrival order (the submit time) while the VC's FIFO guard has fallen back. The
        first reason says which. Returns ``hint`` itself when its priority stays."""
        reasons = hint.reasons
        if reasons and reasons[0].feature.startswith(OVERRIDE_TAGS):
            reasons = reasons[1:]
        g = max(ev.num_gpus, 1)
        if st.bound.is_overdue(ev.job_id):
            first = FeatureContribution.model_construct(
                feature="wait_bound:overdue", contribution=round(st.bound.overdue[ev.job_id], 3)
            )
            prio = overdue_priority(ev.submit_time)
        elif st.guard.fallback:
            tag, score = st.guard.reason()
            first = FeatureContribution.model_construct(feature=tag, contribution=score)
            prio = ev.submit_time
        else:
            prio = model_priority
            if prio == hint.priority:
                return hint
            first = FeatureContribution.model_construct(
                feature="updated:expected_s", contribution=prio / g
            )
        if prio == hint.priority and reasons and reasons[0] == first:
            return hint
        # values already valid (finite, non-negative): a shallow copy, no re-validation
        return hint.model_copy(
            update={
                "priority": prio,
                "reasons": (first, *reasons[:4]),
                "created_at": self.clock(),
                **rescaled(hint, model_priority / g),
            }
        )

    def _reemit(self, st: VcState, ev: JobEvent) -> PriorityHint | None:
        """An already-applied event: write what the current state says about its job.

        The first redelivered event of a VC in this process also re-writes every waiting
        hint of the VC: a redelivered finish may have moved its siblings' hints (hint
        updates) in a batch whose store writes were lost."""
        self.stats.redelivered += 1
        key = state_key(ev.cluster, ev.vc)
        if key not in self._reemitted:
            self._reemitted.add(key)
            for waiting in st.pending.values():
                self.store.put_hint(waiting.hint)
        return self._reemit_job(st, ev)

    def _reemit_job(self, st: VcState, ev: JobEvent) -> PriorityHint | None:
        """Write what the current state says about the event's job (idempotent): its
        hint while it waits (returned for a submit), else its hint's removal."""
        job = st.pending.get(ev.job_id)
        if job is not None:
            self.store.put_hint(job.hint)
            return job.hint if ev.phase is JobPhase.SUBMITTED else None
        self.store.remove_hint(ev.cluster, ev.vc, ev.job_id)
        return None

    def rebuild(self, keys: Iterable[str] | None = None) -> int:
        """Re-write every pending hint of the VCs ``keys`` (default: all in ``states``)
        after the store came back empty; return how many were written."""
        n = 0
        for key in list(self.states) if keys is None else keys:
            st = self.states.get(key)
            if st is None:
                continue
            for job in st.pending.values():
                self.store.put_hint(job.hint, rebuilt=True)
                n += 1
        return n
