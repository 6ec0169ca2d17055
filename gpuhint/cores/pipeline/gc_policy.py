"""Keep Python's cyclic garbage collector from pausing the worker for long.

A worker's heap is mostly long-lived: imported code, Faust's machinery and every VC's
model state, which grows with the jobs it has seen. CPython's full (generation 2)
collection walks all of it, and it runs whenever that part has grown by a quarter: on
the 2-core machine, pauses of 90-240 ms every few seconds while a worker builds state,
which set the worker's p99 hint latency (docs/benchmarks.md).

:class:`HeapFreezer` moves what has survived into CPython's permanent generation
(``gc.freeze``) on a cadence, after a cheap young collection, so full collections
only walk what is new. Cyclic garbage that was frozen is reclaimed by an unfreeze and
a full collection every ``full_s`` (one longer pause then, logged). Reference counting
frees everything else as usual; only garbage in reference cycles waits. Pure: the
``gc`` module and the clock are parameters.

>>> class FakeGc:
...     def __init__(self): self.calls = []
...     def collect(self, generation=2): self.calls.append(f"collect{generation}"); return 0
...     def freeze(self): self.calls.append("freeze")
...     def unfreeze(self): self.calls.append("unfreeze")
...     def get_freeze_count(self): return 7
>>> now, fake = [0.0], FakeGc()
>>> f = HeapFreezer(1.0, 600.0, clock=lambda: now[0], gc_module=fake)
>>> f.tick(), fake.calls   # the first tick freezes the start-up heap
('freeze', ['collect1', 'freeze'])
>>> now[0] = 0.5; f.tick()
>>> now[0] = 600.0; f.tick(), fake.calls[-3:]
('full', ['unfreeze', 'collect2', 'freeze'])

The first full pass comes one ``full_s`` after the first tick, not at start-up: a full
collection while the worker was starting left it with ~1 s hint stalls for the rest
of a run (measured five times, not understood; docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

log = logging.getLogger(__name__)


class HeapFreezer:
    """Freeze the surviving heap every ``freeze_s``; unfreeze and collect all every
    ``full_s``. ``freeze_s`` 0 turns it off (CPython's own schedule)."""

    def __init__(
        self,
        freeze_s: float,
        full_s: float,
        clock: Callable[[], float] = time.monotonic,
        gc_module: Any = gc,
    ) -> None:
        self.freeze_s = freeze_s
        self.full_s = full_s
        self.clock = clock
        self.gc = gc_module
        self._last_freeze: float | None = None
        self._last_full: float | None = None
        self.fulls = 0
        self.freezes = 0

    def tick(self) -> Literal["freeze", "full"] | None:
        """Do what is due now; say what was done."""
        if self.freeze_s <= 0:
            return None
        now = self.clock()
        if self._last_full is None:
            self._last_full = now  # the first full pass one period from now
        elif now - self._last_full >= self.full_s:
            t0 = time.perf_counter()
            self.gc.unfreeze()
            freed = self.gc.collect(2)
            self.gc.freeze()
            self._last_full = self._last_freeze = now
            self.fulls += 1
            log.info(
                "full garbage collection: %d objects freed, %d frozen, %.0f ms",
                freed,
                self.gc.get_freeze_count(),
                (time.perf_counter() - t0) * 1e3,
            )
            return "full"
        if self._last_freeze is not None and now - self._last_freeze < self.freeze_s:
            return None
        self.gc.collect(1)  # young garbage first: only survivors are frozen
        self.gc.freeze()
        self._last_freeze = now
        self.freezes += 1
        return "freeze"
