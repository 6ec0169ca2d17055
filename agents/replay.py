"""Replay a historical trace into Kafka as JobEvents, in time order.

The pacing is pure (:func:`paced`), the sending goes through any ``send(topic, key,
value)`` callable, so tests drive it without a broker and the CLI with kafka-python.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from gpuhint.contract import JobEvent, encode_message
from gpuhint.topics import job_key

Send = Callable[[str, bytes, bytes], object]


def paced(
    events: Iterable[JobEvent],
    speed: float | None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[JobEvent]:
    """Yield events, sleeping so that trace time runs ``speed`` times faster than real time.

    ``speed=None`` yields as fast as the consumer takes them.
    """
    t0_trace: float | None = None
    t0_wall = clock()
    for ev in events:
        if speed is not None:
            if t0_trace is None:
                t0_trace = ev.time
            due = t0_wall + (ev.time - t0_trace) / speed
            delay = due - clock()
            if delay > 0:
                sleep(delay)
        yield ev


def replay(events: Iterable[JobEvent], topic: str, send: Send) -> int:
    """Send each event to ``topic`` keyed by cluster/VC; return how many were sent."""
    n = 0
    for ev in events:
        send(topic, job_key(ev.cluster, ev.vc), encode_message(ev))
        n += 1
    return n
