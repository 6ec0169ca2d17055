"""Natural batching for a Faust stream: a batch is what is ready, not what a timer saw.

Faust's ``Stream.take_events(max_, within)`` yields a batch when ``max_`` events are
buffered or ``within`` seconds have passed since it last looked. A small window costs
throughput (a backlog drains in small batches, each with its own Redis flush); a large
one adds up to ``within`` to every event's latency when traffic is light.
:func:`take_ready` yields as soon as the stream's input queue has nothing more to give
right now -- one event at a time when traffic is light, full batches from a backlog --
and keeps ``within`` only as the upper bound Faust's version has.

It is Faust's ``take_events`` (faust-streaming 0.15, ``faust/streams.py``) with that one
condition added, and the same contract: the stream's own acks are off while it runs,
and each yielded event is acked once the consumer of the batch asks for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mode.utils.futures import notify

__all__ = ["take_ready"]


async def take_ready(stream: Any, max_: int, within: float) -> AsyncIterator[Sequence[Any]]:
    """Yield lists of up to ``max_`` events: when full, when the input queue is empty
    (all that is ready), or after ``within`` seconds with events buffered."""
    events: list[Any] = []
    ready = asyncio.Event()  # full, or the input queue ran dry
    consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    queue = stream.channel.queue
    channel_it = stream.channel.__aiter__()

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        try:
            if consuming is not None:
                try:
                    await consuming
                finally:
                    consuming = None
            event = stream.current_event
            if event is None:
                raise RuntimeError("take_ready found current_event is None")
            events.append(event)
            if len(events) >= max_:
                ready.set()
                consumed.clear()
                await stream.wait(consumed)  # never more than max_ in one batch
            elif queue.empty():
                ready.set()  # nothing else is ready: do not wait for the timer
        except asyncio.CancelledError:  # pragma: no cover
            raise
        except Exception as exc:  # pragma: no cover - as Faust's take_events
            stream.log.exception("Error adding to take buffer: %r", exc)
            await stream.crash(exc)
        return value

    stream.enable_acks = False
    stream.add_processor(add_to_buffer)
    stream._enable_passive(channel_it)
    while not stream.should_stop:
        await stream.wait_for_stopped(ready, timeout=within)
        if events:
            consuming = stream.loop.create_future()
            try:
                yield list(events)
            finally:
                for event in events:
                    await stream.ack(event)
                events.clear()
                ready.clear()  # before the held-back add runs: its signal must stand
                consumed.set()
                notify(consuming)
        else:
            ready.clear()
