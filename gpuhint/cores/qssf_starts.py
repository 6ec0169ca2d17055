"""The QSSF hint engine's expected-start plumbing (a mixin of
:class:`gpuhint.cores.qssf.HintEngine`).

Each VC's :class:`gpuhint.cores.start_forecast.StartBook` follows arrivals (at the
model's priority), starts and finishes; after the event's hint updates and starvation
bound, at most every ``start_every_s`` of event time the VC's expected starts are
re-forecast (:func:`gpuhint.cores.start_forecast.forecast_vc`) for its first
``start_limit`` waiting jobs and written with ``HintStore.put_starts``.
"""

from __future__ import annotations

from gpuhint.cores.qssf_state import PendingJob, VcState
from gpuhint.cores.sink import HintStore
from gpuhint.cores.start_forecast import forecast_vc
from gpuhint.wire.contract import JobEvent, JobPhase, PriorityHint


class StartPlumbing:
    """Feeds each VC's start book and publishes its expected starts when due."""

    store: HintStore
    start_every_s: float
    start_limit: int

    def _track_starts(
        self, st: VcState, ev: JobEvent, waiting: PendingJob | None, hint: PriorityHint | None
    ) -> None:
        """Feed the VC's start book with an applied event. An arrival is booked at the
        model's priority: while the FIFO guard has fallen back the published one is the
        submit time, not GPU-seconds."""
        book = st.starts
        if ev.phase is JobPhase.SUBMITTED and hint is not None:
            book.arrived(ev.time, st.model_priority.get(ev.job_id, hint.priority))
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

    def _publish_starts(self, st: VcState, ev: JobEvent) -> None:
        """Re-forecast the VC's expected starts when due (after the event's hint
        updates and starvation bound: the ranks as published). While the FIFO guard
        has fallen back the hints follow arrival order, which no later arrival
        overtakes."""
        book = st.starts
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
                    overtake=not st.guard.fallback,
                )
            )
            book.published_at = ev.time
