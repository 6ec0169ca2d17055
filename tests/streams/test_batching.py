"""Natural batching: a batch is what is ready (no timer wait), never more than max_."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust

from streams.batching import take_ready


def _run(values: list[int], max_: int, within: float, batches_wanted: int) -> list[list[int]]:
    """Queue ``values`` on an agent's test channel, then let the agent batch them."""
    app = faust.App("batching-test", autodiscover=False, web_enabled=False)
    channel = app.channel(value_type=int, maxsize=1000)
    got: list[list[int]] = []
    done = asyncio.Event()

    @app.agent(channel)
    async def batcher(stream: Any) -> None:
        async for batch in take_ready(stream, max_, within):
            got.append([e.value for e in batch])
            if len(got) >= batches_wanted:
                done.set()

    async def main() -> None:
        async with batcher.test_context() as agent:
            for v in values:  # all queued before the agent looks
                await agent.put(v, wait=False)
            await asyncio.wait_for(done.wait(), 10)

    asyncio.run(main())
    return got


def test_what_is_ready_is_yielded_without_waiting_for_the_window() -> None:
    t0 = time.monotonic()
    got = _run([1, 2, 3], max_=10, within=30.0, batches_wanted=1)
    assert time.monotonic() - t0 < 5  # not the 30 s window
    assert got == [[1, 2, 3]]


def test_a_backlog_comes_in_full_batches_of_at_most_max() -> None:
    got = _run(list(range(25)), max_=10, within=30.0, batches_wanted=3)
    assert got == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
