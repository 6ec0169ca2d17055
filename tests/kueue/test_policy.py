"""The class ladder, the plan and the preemption guard (pure)."""

from __future__ import annotations

import pytest

from gpuhint.kueue.policy import (
    ClassLadder,
    QueuePolicy,
    WorkloadView,
    fade_weight,
    plan,
    priority_ceilings,
)

LADDER = ClassLadder(classes=10, base=0, min_service_s=600, max_service_s=5_529_600)


def _wl(
    name: str,
    job_id: str,
    *,
    cq: str = "cq",
    cls: str | None = None,
    prio: int = 0,
    pending: bool = True,
    job: bool = True,
    kind: str | None = None,
) -> WorkloadView:
    return WorkloadView("ns", f"wl-{name}", name if job else None, job_id, cq, cls, prio,
                        pending, kind)  # fmt: skip


def test_ladder_is_monotone_and_bounded() -> None:
    services = [1, 600, 601, 5_000, 50_000, 500_000, 5_529_599, 5_529_600, 1e12]
    values = [LADDER.class_for(s).value for s in services]
    assert values == sorted(values, reverse=True)  # smaller service, higher priority
    assert values[0] == values[1] == 9 and values[-1] == values[-2] == 0
    assert {c.name for c in LADDER.all()} == {f"gpuhint-{k:02d}" for k in range(10)}
    assert LADDER.owns("gpuhint-03") and not LADDER.owns("gpuhint-100")
    assert not LADDER.owns(None) and not LADDER.owns("high")


@pytest.mark.parametrize(
    "kw", [{"classes": 1}, {"classes": 101}, {"min_service_s": 0}, {"base": 10**9}]
)
def test_ladder_rejects_bad_settings(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ClassLadder(**kw)  # type: ignore[arg-type]


def test_plan_relabels_only_what_changes_and_never_admitted_or_foreign() -> None:
    small, big = 60.0, 1e6
    top, low = LADDER.class_for(small), LADDER.class_for(big)
    views = [
        _wl("a", "ja"),  # no class yet -> top
        _wl("b", "jb", cls=low.name, prio=low.value),  # already right -> unchanged
        _wl("c", "jc", cls=low.name),  # hint moved -> relabel
        _wl("d", "jd", pending=False),  # admitted -> never
        _wl("e", "je", cls="high"),  # the owner's class -> never
        _wl("f", "jf", kind="PriorityClass"),  # pod priority -> never
        _wl("g", "jg"),  # no hint
        _wl("h", "jh", job=False),  # not a Job's Workload
    ]
    services = {"ja": small, "jb": big, "jc": small, "jd": small, "je": small, "jf": small,
                "jh": small}  # fmt: skip
    p = plan(views, services, LADDER)
    assert [(r.job_name, r.old_class, r.new_class.name) for r in p.relabel] == [
        ("a", None, top.name),
        ("c", low.name, top.name),
    ]
    assert p.unchanged == 1
    assert p.skipped == {"admitted": 1, "foreign-class": 2, "no-hint": 1, "not-a-job": 1}


def test_guard_keeps_waiting_workloads_below_admitted_ones_when_the_queue_may_preempt() -> None:
    lower = QueuePolicy("cq", within_cluster_queue="LowerPriority")
    admitted = _wl("run", "jr", prio=5, pending=False)
    waiting = _wl("w", "jw")
    assert priority_ceilings([lower], [admitted, waiting]) == {"cq": 4}
    p = plan([admitted, waiting], {"jw": 1.0}, LADDER, [lower])
    assert [r.new_class.value for r in p.relabel] == [4]  # not 9: it would preempt "run"
    # nothing admitted below the lowest class: left alone
    p = plan([_wl("run", "jr", prio=0, pending=False), waiting], {"jw": 1.0}, LADDER, [lower])
    assert p.relabel == [] and p.skipped["preemption-guard"] == 1
    # Kueue's default (Never everywhere): the full ladder
    p = plan([admitted, waiting], {"jw": 1.0}, LADDER, [QueuePolicy("cq")])
    assert [r.new_class.value for r in p.relabel] == [9]


def test_guard_spans_the_cohort() -> None:
    queues = [
        QueuePolicy("a", cohort="co", reclaim_within_cohort="Any"),
        QueuePolicy("b", cohort="co"),
        QueuePolicy("c"),
    ]
    views = [_wl("x", "jx", cq="b", prio=3, pending=False), _wl("y", "jy", cq="c", prio=1,
             pending=False)]  # fmt: skip
    assert priority_ceilings(queues, views) == {"a": 2, "b": None, "c": None}


# -- gpuhint down: Workloads without a hint, stale hints ----------------------------------


def test_unhinted_workloads_get_the_neutral_class_within_the_guards() -> None:
    neutral = LADDER.neutral_class("median", [9, 0, 5])
    assert neutral.name == "gpuhint-05"
    assert LADDER.neutral_class("median", []).name == "gpuhint-05"  # nobody hinted: middle
    assert LADDER.neutral_class("midpoint", [9]).name == "gpuhint-05"
    assert LADDER.neutral_class(7, [9]).name == "gpuhint-07"
    wls = [
        _wl("a", "A"),  # no hint: neutral
        _wl("b", "B", cls="gpuhint-05"),  # no hint, already neutral
        _wl("c", "C", cls="team-high"),  # the owner's class: never touched
        _wl("d", "D", pending=False, cls=None),  # admitted: never touched
        _wl("e", "E"),  # hinted
    ]
    p = plan(wls, {"E": 100.0}, LADDER, neutral=neutral)
    assert [(r.job_name, r.new_class.name, r.service_s) for r in p.relabel] == [
        ("a", "gpuhint-05", None),
        ("e", "gpuhint-09", 100.0),
    ]
    assert (p.unhinted, p.unchanged, p.skipped) == (
        2, 1, {"foreign-class": 1, "admitted": 1}
    )  # fmt: skip
    assert plan(wls, {"E": 100.0}, LADDER).skipped["no-hint"] == 2  # neutral None: as before
    # a queue that may preempt: the neutral class too stays below the lowest admitted
    guarded = plan(
        [_wl("a", "A"), _wl("h", "H"), _wl("d", "D", pending=False, prio=3)],
        {"H": 1e12},
        LADDER,
        [QueuePolicy("cq", within_cluster_queue="LowerPriority")],
        neutral=neutral,
    )
    assert {r.job_name: r.new_class.name for r in guarded.relabel} == {
        "a": "gpuhint-02",
        "h": "gpuhint-00",
    }


def test_a_cluster_queue_without_any_hint_keeps_kueues_order() -> None:
    """gpuhint ranks no Workload of queue "other" (not served, or every one of its
    Workloads equal anyway): its unhinted Workloads are left alone."""
    wls = [_wl("a", "A"), _wl("e", "E"), _wl("x", "X", cq="other")]
    p = plan(wls, {"E": 100.0}, LADDER, neutral=LADDER.at(5))
    assert sorted(r.job_name for r in p.relabel) == ["a", "e"]
    assert p.skipped == {"no-hint": 1}


def test_stale_hints_fade_to_the_neutral_class() -> None:
    neutral = LADDER.at(5)
    wls = [_wl("s", "S"), _wl("b", "B")]
    services = {"S": 100.0, "B": 1e12}  # rungs 9 and 0
    half = plan(wls, services, LADDER, neutral=neutral, weight=0.5)
    assert [r.new_class.name for r in half.relabel] == ["gpuhint-07", "gpuhint-02"]
    assert half.faded == 2
    gone = plan(wls, services, LADDER, neutral=neutral, weight=0.0)
    assert {r.new_class.name for r in gone.relabel} == {"gpuhint-05"}  # Kueue's FIFO again
    assert [fade_weight(a, 100, 100, 4) for a in (None, 100, 150, 200)] == [1.0, 1.0, 0.5, 0.0]


def test_guard_lowers_a_class_gpuhint_gave_before_a_lower_one_was_admitted() -> None:
    """A Workload labelled gpuhint-07 while nothing was admitted; since then a priority-0
    Workload was admitted in its preempting queue. Left at 7 it would preempt that one
    because of gpuhint's label: it goes down to gpuhint-00, the lowest gpuhint has (no
    longer above the admitted one)."""
    lower = QueuePolicy("cq", within_cluster_queue="LowerPriority")
    admitted = _wl("run", "jr", prio=0, pending=False)
    waiting = _wl("w", "jw", cls="gpuhint-07", prio=7)
    p = plan([admitted, waiting], {"jw": 1000.0}, LADDER, [lower])
    assert [r.new_class.name for r in p.relabel] == ["gpuhint-00"]
    # already at the bottom, or not labelled by gpuhint: left alone, as before
    for cls in ("gpuhint-00", None):
        p = plan([admitted, _wl("w", "jw", cls=cls)], {"jw": 1000.0}, LADDER, [lower])
        assert p.relabel == [] and p.skipped["preemption-guard"] == 1


def test_a_class_of_a_longer_ladder_is_still_gpuhints_after_classes_shrinks() -> None:
    """An operator goes from 10 classes to 5: a waiting Job labelled gpuhint-07 by the
    old ladder (value 7, above every new class) is moved onto the new ladder, not left
    as an owner's own class jumping the queue for ever."""
    five = ClassLadder(classes=5, base=0, min_service_s=600, max_service_s=5_529_600)
    assert five.owns("gpuhint-07") and five.owns("gpuhint-99")
    assert not five.owns("gpuhint-7") and not five.owns("gpuhint-x1") and not five.owns("urgent")
    p = plan([_wl("w", "jw", cls="gpuhint-07", prio=7)], {"jw": 1e12}, five)
    assert [r.new_class.name for r in p.relabel] == ["gpuhint-00"] and not p.skipped
