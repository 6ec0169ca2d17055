"""The Kueue applier with odd hints: a VC in arrival order and an unreadable hint leave
Workloads at the neutral class, never the bottom; classes of hints that vanished fade."""

from __future__ import annotations

from gpuhint.kueue.applier import Applier
from gpuhint.kueue.hints import MemoryHints
from gpuhint.kueue.memory import InMemoryKueue
from gpuhint.kueue.policy import ClassLadder
from gpuhint.wire.contract import ARRIVAL_ORDER_REASON
from tests.cores.test_applier_hints import NOW, hint


def _kueue(ids: list[str]) -> InMemoryKueue:
    k = InMemoryKueue()
    for j in ids:
        k.add_job("ns", j, job_id=j)
    return k


def _classes(k: InMemoryKueue, ids: list[str]) -> dict[str, str | None]:
    return {j: k.jobs[f"ns/{j}"].job_class for j in ids}


def test_a_vc_in_arrival_order_and_unhinted_jobs_are_not_in_the_bottom_class() -> None:
    hints = {f"b{i}": hint(f"b{i}", NOW - 1000 + i, first=ARRIVAL_ORDER_REASON) for i in range(3)}
    hints["a"] = hint("a", 8 * 3600.0)
    ids = [*hints, "unhinted"]
    k = _kueue(ids)
    r = Applier(k, MemoryHints(hints), "c", ClassLadder(), rate=0, wall=lambda: NOW).run_pass()
    cls = _classes(k, ids)
    assert r.neutral_class == cls["a"] != "gpuhint-00"
    assert cls["b0"] == cls["b1"] == cls["b2"] == cls["unhinted"] == r.neutral_class


def test_an_unreadable_hint_leaves_its_workload_neutral_and_the_pass_goes_on() -> None:
    ids = ["small", "mid", "big", "new"]
    hints = MemoryHints({j: hint(j, s) for j, s in zip(ids, (60.0, 1e5, 1e7), strict=False)})
    hints.junk = ["gpuhint:v1:hint:c:new"]
    k = _kueue(ids)
    r = Applier(k, hints, "c", ClassLadder(), rate=0, wall=lambda: NOW).run_pass()
    cls = _classes(k, ids)
    assert cls["new"] == r.neutral_class == cls["mid"] not in (cls["small"], cls["big"])


def test_classes_of_hints_that_vanished_fade_to_neutral() -> None:
    hints = MemoryHints({"s": hint("s", 60.0), "b": hint("b", 1e7)})
    now = [NOW]
    k = _kueue(["s", "b"])
    a = Applier(k, hints, "c", ClassLadder(), rate=0, wall=lambda: now[0])
    a.run_pass()
    assert _classes(k, ["s", "b"]) == {"s": "gpuhint-09", "b": "gpuhint-00"}
    hints.hints.clear()  # Redis restarted empty while the worker is down
    now[0] += 10 * 3600
    r = a.run_pass()
    assert _classes(k, ["s", "b"]) == {"s": r.neutral_class, "b": r.neutral_class}
    k.add_job("ns", "plain", job_id="plain")  # never ranked by gpuhint: Kueue's order
    assert a.run_pass().skipped.get("no-hint") == 1
    assert k.jobs["ns/plain"].job_class is None
