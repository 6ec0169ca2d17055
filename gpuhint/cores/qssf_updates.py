"""Hint updates and the starvation bound of the QSSF hint engine (a mixin of
:class:`gpuhint.cores.qssf.HintEngine`; docs there and in docs/qssf.md).

* :meth:`HintUpdates._rerank`: when a job finishes, re-predict the waiting jobs it bears
  on (the VC's :class:`models.pending_index.PendingIndex`), plus a few bursts taken
  round-robin, and write those whose priority moved.
* :meth:`HintUpdates._enforce_bound`: move the oldest overdue waiting job to the front
  (:class:`models.wait_bound.WaitBound`).
* :meth:`HintUpdates._rebound`: the bound turned on or off at a restart.
* :meth:`HintUpdates._published`: one estimate per published hint (the model's, the
  FIFO guard's arrival order, or the overdue front).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuhint.cores.qssf_state import EngineStats, PendingJob, VcState
from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import FeatureContribution, JobEvent, PriorityHint
from models.hint_estimate import OVERRIDE_TAGS, overdue_priority, rescaled


class HintUpdates:
    """Re-ranks a VC's waiting jobs and enforces its wait bound; writes moved hints."""

    store: HintStore
    stats: EngineStats
    clock: Callable[[], float]
    max_updates: int
    refresh: int
    updates: list[PriorityHint]

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
            self._write_update(job, hint)

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
            self._write_update(job, hint)
            self.stats.overdue += 1

    def _rebound(self, st: VcState, factor: float) -> None:
        """The bound's factor changed (a state saved under another setting): turned on,
        the jobs waiting already come under it; turned off, the job at the front goes
        back to its rank (no hint stays overridden by a bound that is off)."""
        was_off, st.bound.factor = st.bound.factor <= 0, factor
        if factor > 0:
            if was_off:
                st.track_waiting()
            return
        for jid in list(st.bound.overdue):
            st.bound.forget(jid)
            job = st.pending.get(jid)
            if job is None:
                continue
            mp = st.model_priority.get(jid)
            if mp is None:  # (cannot happen) the estimate the hint describes
                mp = (job.hint.expected_duration_s or 0.0) * max(job.event.num_gpus, 1)
            hint = self._published(st, job.hint, job.event, mp)
            if hint is not job.hint:
                self._write_update(job, hint)

    def _write_update(self, job: PendingJob, hint: PriorityHint) -> None:
        """Publish ``hint`` as the waiting ``job``'s new hint (a hint update)."""
        job.hint = hint
        self.store.update_hint(hint)
        self.updates.append(hint)
        self.stats.hints_updated += 1

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
