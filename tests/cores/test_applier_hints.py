"""What the appliers take from the hints: odd values leave one job unhinted, a VC in
arrival order is no opinion, every readable hint is a sign of life."""

from __future__ import annotations

import pytest

from gpuhint.cores.applier_hints import UnreadableHints, read_applier_hints
from gpuhint.kueue.hints import MemoryHints
from gpuhint.wire.contract import (
    ARRIVAL_ORDER_REASON,
    ClusterLoad,
    FeatureContribution,
    PriorityHint,
)

NOW = 1_800_000_000.0


def hint(
    job_id: str, priority: float, created: float = NOW, first: str | None = None
) -> PriorityHint:
    reasons = (FeatureContribution(feature=first, contribution=1.0),) if first else ()
    return PriorityHint(job_id=job_id, cluster="c", num_gpus=1, submit_time=NOW - 100,
                        predicted_duration_s=60, priority=priority, model="m",
                        model_version="1", created_at=created, reasons=reasons)  # fmt: skip


def test_arrival_order_hints_are_no_opinion_but_a_sign_of_life() -> None:
    hints = MemoryHints({
        "a": hint("a", 600.0, created=NOW - 50),
        "b": hint("b", NOW - 100, created=NOW, first=ARRIVAL_ORDER_REASON),
        "c": hint("c", 900.0, created=NOW - 10, first="fifo_guard:hints"),
    })  # fmt: skip
    got = read_applier_hints(hints, "c")
    assert got.services == {"a": 600.0, "c": 900.0}
    assert got.arrival_order == 1 and len(got.hints) == 3
    assert got.last_alive == NOW  # b's hint is the newest sign of life
    assert hints.hints["b"].in_arrival_order and not hints.hints["c"].in_arrival_order


def test_unreadable_hints_and_load_are_listed_not_raised() -> None:
    hints = MemoryHints({"a": hint("a", 60.0)})
    hints.junk = ["gpuhint:v1:hint:c:x"]
    with pytest.raises(ValueError):
        hints.pending_hints("c")  # a plain read still says so

    class OddLoad(MemoryHints):
        def load(self, cluster: str) -> ClusterLoad | None:
            raise ValueError("gpuhint:v1:load:c: not a ClusterLoad of this schema")

    odd = OddLoad({"a": hint("a", 60.0)})
    odd.junk = hints.junk
    got = read_applier_hints(odd, "c")
    assert got.services == {"a": 60.0}
    assert got.unreadable == ("gpuhint:v1:hint:c:x", "load of c")


def test_unreadable_hints_are_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    u = UnreadableHints("c")
    with caplog.at_level("INFO", logger="gpuhint.appliers"):
        for keys in ((), ("k1",), ("k1",), ("k1", "k2"), ()):
            u.said(keys)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "1 hint value(s)" in said[0] and "2 hint value(s)" in said[1]
    assert "readable again" in said[2]
