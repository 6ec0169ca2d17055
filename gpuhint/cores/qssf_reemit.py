"""Re-emitting from state (a mixin of :class:`gpuhint.cores.qssf.HintEngine`).

An event already applied (at or below its VC's offset watermark) or resent (a phase its
job already went through) changes no state: its job's store writes are re-emitted from
the current state, so the store converges to it. :meth:`Reemission.rebuild` re-writes
every waiting hint after the store came back empty.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from gpuhint.cores.qssf_state import EngineStats, VcState, state_key
from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import JobEvent, JobPhase, PriorityHint


class Reemission:
    """Writes what the current state says: for a redelivered or resent event, or all."""

    store: HintStore
    stats: EngineStats
    states: MutableMapping[str, VcState]
    _reemitted: set[str]

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
