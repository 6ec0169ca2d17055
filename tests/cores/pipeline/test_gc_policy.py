"""The worker's garbage-collection cadence: freeze on a schedule, a full pass rarely."""

from __future__ import annotations

import gc

from gpuhint.cores.pipeline.gc_policy import HeapFreezer


class RecordingGc:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect{generation}")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def get_freeze_count(self) -> int:
        return 0


def test_freezes_on_its_cadence_and_collects_everything_rarely() -> None:
    now = [0.0]
    fake = RecordingGc()
    f = HeapFreezer(1.0, 10.0, clock=lambda: now[0], gc_module=fake)
    done = []
    for t in [0.0, 0.4, 1.0, 1.5, 2.2, 9.9, 10.0, 10.5, 11.0]:
        now[0] = t
        done.append(f.tick())
    assert done == ["freeze", None, "freeze", None, "freeze", "freeze", "full", None, "freeze"]
    assert fake.calls[:2] == ["collect1", "freeze"]  # young garbage first, then freeze
    assert fake.calls[8:11] == ["unfreeze", "collect2", "freeze"]  # at t=10: the full pass
    assert (f.fulls, f.freezes) == (1, 5)


def test_zero_leaves_the_collector_alone() -> None:
    fake = RecordingGc()
    f = HeapFreezer(0.0, 10.0, gc_module=fake)
    assert f.tick() is None and fake.calls == []


def test_on_the_real_collector_the_heap_is_frozen_then_released() -> None:
    now = [0.0]
    f = HeapFreezer(1.0, 3600.0, clock=lambda: now[0])
    try:
        assert f.tick() == "freeze"
        assert gc.get_freeze_count() > 0
        now[0] = 3600.0
        assert f.tick() == "full" and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
