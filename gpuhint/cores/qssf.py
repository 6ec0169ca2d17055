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
  then **update the hints of the waiting jobs it bears on** (hint updates, below). A
  finish without a duration (a job cancelled, waiting or running) learns nothing; the
  FIFO guard forgets the job (:meth:`models.fifo_guard.FifoGuard.forget`), so that the
  jobs submitted after it still reach its shadow.

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
of a job never seen (a replay that starts mid-way) is learned, once. A ``started`` of
a job not waiting (it arrived before its ``submitted``, or the job ran before the core
did) records the job as running, its GPUs counted, with no forecast to score: its
later ``submitted`` and a resent ``started`` are duplicates.

The engine's parts: its state (:mod:`gpuhint.cores.qssf_state`: :class:`VcState`,
:class:`PendingJob`, :class:`EngineStats`), hint updates and the starvation bound
(:mod:`gpuhint.cores.qssf_updates`), the expected-start plumbing
(:mod:`gpuhint.cores.qssf_starts`) and re-emission from state
(:mod:`gpuhint.cores.qssf_reemit`). This module stays the import path of all of them.

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

import logging
import math
import time
from collections.abc import Callable, MutableMapping

from gpuhint.cores.qssf_reemit import Reemission
from gpuhint.cores.qssf_roster import ROSTER_MISSES, hear, nothing_to_reconcile, take_part
from gpuhint.cores.qssf_starts import StartPlumbing
from gpuhint.cores.qssf_state import (
    RECENT_FINISHED_MAX,
    EngineStats,
    PendingJob,
    VcState,
    _pending_job,
    state_key,
)
from gpuhint.cores.qssf_updates import HintUpdates
from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import JobEvent, JobPhase, JobRoster, PriorityHint, encode_message
from models.base import DurationModel
from models.wait_bound import DEFAULT_WAIT_BOUND, WaitBound

log = logging.getLogger(__name__)

__all__ = [
    "RECENT_FINISHED_MAX",
    "EngineStats",
    "HintEngine",
    "PendingJob",
    "VcState",
    "_pending_job",
    "state_key",
]


def _related_keys(model: DurationModel, ev: JobEvent) -> tuple[str, ...]:
    """The model's keys for the waiting-job index (none for a model without them)."""
    f = getattr(model, "related_keys", None)
    return tuple(f(ev)) if f is not None else ()


def _observe_start(model: DurationModel, ev: JobEvent) -> None:
    f = getattr(model, "observe_start", None)
    if f is not None:
        f(ev)


class HintEngine(HintUpdates, StartPlumbing, Reemission):
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
        self._two_agents_said = -math.inf  # clock time of the last such warning
        self._roster_heard: dict[str, dict[str | None, float]] = {}
        """Per VC, the agents heard from and their latest roster epoch (in memory: a
        restart or a rebalance forgets it until each agent's next roster)."""

    def state(self, cluster: str, vc: str) -> VcState:
        """The VC's state, created (with a fresh model) on first use."""
        key = state_key(cluster, vc)
        st = self.states.get(key)
        if st is None:
            st = VcState(model=self.model_factory(), bound=WaitBound(self.wait_bound))
            self.states[key] = st
        elif st.bound.factor != self.wait_bound:  # a state saved under another setting
            self._rebound(st, self.wait_bound)
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
        duplicate = self._is_duplicate(st, ev)
        if duplicate:
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
        if not duplicate:  # after the bound: the starts list a promoted job at the front
            self._publish_starts(st, ev)
        if offset is not None:
            st.applied_offset = offset
        self.states[state_key(ev.cluster, ev.vc)] = st  # mark dirty
        return hint

    def on_roster(self, roster: JobRoster, offset: int | None = None) -> list[JobEvent]:
        """Process one roster part (``offset`` as for events); return the ``finished``
        events it retired, already applied (:mod:`gpuhint.cores.qssf_roster`)."""
        key = state_key(roster.cluster, roster.vc)
        heard = self._roster_heard.setdefault(key, {})
        hear(heard, roster)
        if nothing_to_reconcile(self.states.get(key), roster, offset):
            return []
        st = self.state(roster.cluster, roster.vc)
        if offset is not None and offset <= st.applied_offset:
            # redelivered: applied already, but its forwards may have been lost
            done_at, done = st.roster_retired
            return [JobEvent.model_validate_json(e) for e in done] if offset == done_at else []
        self.stats.rosters += 1
        retired, switched_back = take_part(st, roster, heard)
        if switched_back:
            self._two_agents(roster)
        if retired:  # one line a roster, however many (a long outage retires thousands)
            names = ", ".join(ev.job_id for ev in retired[:10])
            log.warning(
                "%s/%s: %d job(s) retired, left out of %d rosters in a row by the scheduler "
                "agent (their end was never announced): %s%s",
                roster.cluster,
                roster.vc,
                len(retired),
                ROSTER_MISSES,
                names,
                ", ..." if len(retired) > 10 else "",
            )
        for ev in retired:
            self.on_job_event(ev)
            # not a finish the agent announced: should it list or announce the job
            # again (a false retirement), its events are applied, not taken as resends
            st.recent_finished.pop(ev.job_id, None)
        self.stats.retired += len(retired)
        if offset is not None:
            st.applied_offset = offset
            if retired:
                st.roster_retired = (offset, tuple(encode_message(e) for e in retired))
        self.states[key] = st  # mark dirty
        return retired

    def _two_agents(self, roster: JobRoster) -> None:
        """Count a roster whose agent took its VC back from another one; warn at most
        hourly: one line, however many VCs the two agents share."""
        self.stats.roster_switchbacks += 1
        now = self.clock()
        if now - self._two_agents_said < 3600.0:
            return
        self._two_agents_said = now
        log.warning(
            "%s/%s: rosters alternate between two scheduler agents (now %s): run one agent "
            "per cluster name (GPUHINT_CLUSTER); until then their rosters retire no job there",
            roster.cluster,
            roster.vc,
            roster.agent,
        )

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
            else:  # never seen waiting: a start before its submit (out of order), or a
                # job that ran before this core did; running, so that its submit and a
                # resent start are duplicates. No submit-time forecast to score (NaN).
                st.running[ev.job_id] = math.nan
                start = ev.start_time if ev.start_time is not None else ev.time
                st.started_unseen[ev.job_id] = (start, ev.num_gpus)
            _observe_start(st.model, ev)
            st.running_gpus += ev.num_gpus
            return None
        s.finished += 1
        job = st.pending.pop(ev.job_id, None)
        was_running = ev.job_id in st.running
        st.started_unseen.pop(ev.job_id, None)
        predicted = st.running.pop(ev.job_id, None)
        if predicted is not None and math.isnan(predicted):
            predicted = None  # started without a submit seen: nothing to score
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
        else:  # cancelled (waiting or running): no duration for the guard to replay;
            # later jobs must not wait behind its entry to reach FIFO's shadow, and the
            # model stops counting it as waiting or running (its siblings' evidence)
            keys = _related_keys(st.model, ev)
            forget = getattr(st.model, "forget", None)
            if forget is not None:
                forget(ev)
            seen = st.guard.shadow.jobs
            flipped = st.guard.forget(ev.job_id)
            if st.guard.shadow.jobs != seen:  # the jobs held behind it reached the shadow
                st.bound.scale = st.guard.shadow.max_wait
            if flipped or keys:
                self._rerank(st, ev.time, keys, everyone=flipped)
        if was_running:
            st.running_gpus = max(0, st.running_gpus - ev.num_gpus)
        st.remember_finished(ev.job_id)
        return None
