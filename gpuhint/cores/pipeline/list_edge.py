"""An :class:`~gpuhint.cores.pipeline.checkpoint.Edge` over plain messages, for tests
and doctests: a list of what was acknowledged, emitted and sought, and committed offsets
and a log to ask (a read of the commit can be made to fail)."""

from __future__ import annotations

from gpuhint.cores.pipeline.handler import Message, Outcome

__all__ = ["ListEdge"]


class ListEdge:
    """An :class:`Edge` over plain :class:`Message` objects (tests, doctests).

    ``committed`` gives each partition's starting offset (a partition not named was
    never committed); ``log`` (partition -> offsets the log holds) answers
    :meth:`first_offset` (default: every offset exists). The next ``failing_reads``
    reads of a commit raise (the broker busy).
    """

    def __init__(
        self,
        committed: dict[int, int] | None = None,
        log: dict[int, list[int]] | None = None,
        failing_reads: int = 0,
    ) -> None:
        self.committed_offsets = dict(committed or {})
        self.log = log
        self.failing_reads = failing_reads
        self.acked: list[Message] = []
        self.emitted: list[Outcome] = []
        self.seeks: list[tuple[int, int]] = []

    def message(self, event: Message) -> Message:
        return event

    def hold(self, event: Message) -> None:
        pass

    def ack(self, event: Message) -> None:
        self.acked.append(event)

    async def emit(self, outcome: Outcome) -> None:
        self.emitted.append(outcome)

    async def committed(self, partition: int) -> int | None:
        if self.failing_reads > 0:
            self.failing_reads -= 1
            raise ConnectionError("the group coordinator is loading")
        return self.committed_offsets.get(partition)

    async def first_offset(self, partition: int, at: int) -> int | None:
        if self.log is None:
            return at
        return next((o for o in self.log.get(partition, []) if o >= at), None)

    async def seek(self, partition: int, offset: int) -> None:
        self.seeks.append((partition, offset))
