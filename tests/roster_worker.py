"""The worker's message path over what agents published, in process (tests of rosters
against a real scheduler: the scheduler is real, the worker is its handler)."""

from __future__ import annotations

from agents.publisher import MemoryTransport
from gpuhint.cores.pipeline.cluster_load import make_processor
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase, decode_message
from gpuhint.wire.topics import Topics
from models.history import HistoryEstimator


class HandlerWorker:
    """Job-event records in order (one partition), their CES forwards applied."""

    def __init__(self) -> None:
        store = InMemoryStore()
        self.handler = MessageHandler(
            HintEngine(HistoryEstimator, store), Topics(), make_processor(store, policy="jobs")
        )
        self.offset = 0
        self.ended: list[JobEvent] = []  # the finished events forwarded to CES

    def take(self, transport: MemoryTransport) -> None:
        """Handle (and drop) every record the agent's transport holds."""
        records, transport.records[:] = list(transport.records), []
        for r in records:
            if r.topic != self.handler.topics.job_events:
                continue
            out = self.handler.job_event(Message(r.topic, 0, self.offset, r.key, r.value))
            assert out.dead_letter is None, out.reason
            self.offset += 1
            for f in out.forwards:
                fwd = decode_message(f.value)
                if isinstance(fwd, JobEvent) and fwd.phase is JobPhase.FINISHED:
                    self.ended.append(fwd)
                tele = Message(f.topic, 0, 0, f.key, f.value)
                assert self.handler.telemetry(tele).dead_letter is None

    def holds(self, job_id: str) -> bool:
        """Whether any VC holds the job waiting or running."""
        return any(
            job_id in st.pending or job_id in st.running
            for st in self.handler.engine.states.values()
        )
