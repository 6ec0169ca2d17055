"""The pure power core: which nodes go down or up (no Slurm, no Redis)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuhint.slurm.power import Node, PowerApplier, plan_power
from gpuhint.wire.contract import PowerAction, PowerAdvisory


def _nodes(*states: str) -> list[Node]:
    return [Node(f"n{i + 1}", s) for i, s in enumerate(states)]


def test_never_powers_down_busy_nodes_and_keeps_the_buffer() -> None:
    nodes = _nodes("allocated", "mixed", "idle", "idle", "idle")
    plan = plan_power(nodes, target_on=0, min_idle=1)
    assert sorted(plan.down) == ["n4", "n5"] and plan.target_on == 3 and plan.held_back == 0 + 3
    assert plan_power(nodes, target_on=0, min_idle=3).down == []


def test_named_nodes_go_first_and_powering_nodes_are_left_alone() -> None:
    nodes = _nodes("idle", "idle", "idle!", "idle%", "idle#", "idle")
    plan = plan_power(nodes, target_on=2, min_idle=0, prefer_down=["n1"])
    assert plan.down == ["n1", "n6"]  # n3/n4 already going down, n5 coming up counts as on


def test_wakes_for_the_buffer_without_advice() -> None:
    nodes = _nodes("allocated", "allocated", "idle~", "idle~", "down*")
    assert plan_power(nodes, target_on=None, min_idle=1).lines == [
        "update nodename=n3 state=power_up"
    ]
    assert plan_power(nodes, target_on=None, min_idle=0).lines == []
    assert plan_power(nodes, target_on=4, min_idle=0, exclude=["n3"]).up == ["n4"]


class _Slurm:
    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = nodes
        self.applied: list[str] = []

    def nodes(self) -> list[Node]:
        return self._nodes

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.applied.extend(lines)
        return ["Invalid node state specified"] if lines else []


class _Advice:
    def __init__(self, adv: PowerAdvisory | None) -> None:
        self.adv = adv

    def cluster_advice(self, cluster: str) -> PowerAdvisory | None:
        return self.adv


def test_applier_ignores_stale_advice_and_counts_refusals() -> None:
    adv = PowerAdvisory(time=1000.0, action=PowerAction.POWER_DOWN, count=2, reason="t",
                        active_nodes=1)  # fmt: skip
    slurm = _Slurm(_nodes("idle", "idle", "idle"))
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=1, max_age_s=600)
    r = a.run_pass(now=1100.0)
    assert r.powered_down == [] and r.refused == 1 and a.total_refused == 1  # not done
    assert r.refused_nodes == ["n2", "n3"] and r.lines == [
        "update nodename=n3,n2 state=power_down_asap"
    ]
    stale = PowerApplier(_Slurm(_nodes("idle", "idle")), _Advice(adv), "c", max_age_s=600)
    assert stale.run_pass(now=5000.0).lines == []
    dry = _Slurm(_nodes("idle", "idle"))
    r = PowerApplier(dry, _Advice(adv), "c", min_idle=0, dry_run=True).run_pass(now=1000.0)
    assert r.lines == ["update nodename=n2 state=power_down_asap"] and dry.applied == []


class _AcceptingSlurm(_Slurm):
    def apply(self, lines: Sequence[str]) -> list[str]:
        self.applied.extend(lines)
        return []


def test_a_node_slurm_could_not_wake_is_left_out_and_another_woken() -> None:
    adv = PowerAdvisory(time=0.0, action=PowerAction.KEEP, count=0, reason="t", active_nodes=3)
    # n3 is down~: Slurm gave up resuming it (ResumeTimeout); n4 and n5 are idle~
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "down~", "idle~", "idle~"))
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=1)
    r = a.run_pass(now=10.0)
    assert r.powered_up == ["n4"] and "n3" not in r.lines[0]
    assert r.resume_failed == ["n3"] and r.newly_failed == ["n3"]
    assert r.as_dict()["resume_failed"] == ["n3"]
    again = a.run_pass(now=20.0)
    assert again.newly_failed == [] and again.resume_failed == ["n3"]  # reported once


def test_a_node_not_up_after_the_resume_timeout_is_replaced_and_forgiven_later() -> None:
    adv = PowerAdvisory(time=0.0, action=PowerAction.KEEP, count=0, reason="t", active_nodes=3)
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "idle~", "idle~"))
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=1, resume_timeout_s=100)
    assert a.run_pass(now=0.0).powered_up == ["n3"]
    slurm._nodes = _nodes("allocated", "idle", "idle#", "idle~")  # still booting
    assert a.run_pass(now=50.0).resume_failed == []
    slurm._nodes = _nodes("allocated", "idle", "idle#", "idle~")  # still not up: failed
    r = a.run_pass(now=150.0)
    assert r.newly_failed == ["n3"] and r.powered_up == ["n4"]
    slurm._nodes = _nodes("allocated", "idle", "idle", "idle")  # fixed by an admin
    assert a.run_pass(now=400.0).resume_failed == []


def test_down_powered_off_nodes_are_never_woken_by_the_plan() -> None:
    plan = plan_power(_nodes("allocated", "down~", "idle~"), target_on=3, min_idle=1)
    assert plan.up == ["n3"]


def test_per_node_advice_powers_down_exactly_the_named_idle_nodes() -> None:
    from gpuhint.slurm.power import plan_named

    nodes = _nodes("allocated", "idle", "idle", "idle", "idle~", "idle~")
    # the count planner would take the highest-numbered idle nodes (n4, n3)
    assert plan_power(nodes, target_on=2, min_idle=1).down == ["n4", "n3"]
    plan = plan_named(nodes, off=["n2", "n5", "n6"], min_idle=1)
    assert plan.down == ["n2"] and plan.up == []  # n5, n6 stay off; nothing else goes
    plan = plan_named(nodes, off=["n2", "n3", "n4", "n6"], min_idle=1)
    assert plan.down == ["n2", "n3"] and plan.held_back == 1  # the floor keeps one idle
    assert plan.up == ["n5"]  # powered down but not named: CES wants it on
    busy_named = plan_named(_nodes("allocated", "idle"), off=["n1", "n2"], min_idle=0)
    assert busy_named.down == ["n2"]  # a named node with a job is never touched


def test_applier_uses_the_named_nodes_when_the_advisory_has_them() -> None:
    adv = PowerAdvisory(time=0.0, action=PowerAction.POWER_DOWN, count=1, nodes=("n2",),
                        reason="t", active_nodes=2, off_nodes=("n2", "n3"))  # fmt: skip
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "idle", "idle", "idle~"))
    r = PowerApplier(slurm, _Advice(adv), "c", min_idle=1).run_pass(now=10.0)
    assert r.powered_down == ["n2", "n3"] and r.powered_up == ["n5"]
    count_only = adv.model_copy(update={"off_nodes": None})
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "idle", "idle", "idle~"))
    r = PowerApplier(slurm, _Advice(count_only), "c", min_idle=1).run_pass(now=10.0)
    assert r.powered_down == ["n2", "n4"]  # the named one first, then the count's choice


def test_a_named_wake_of_a_failed_node_wakes_another_in_its_place() -> None:
    # per-node advice: wake n3 (one more node on); n4 and n5 stay off in the advice
    adv = PowerAdvisory(time=0.0, action=PowerAction.WAKE, count=1, nodes=("n3",), reason="t",
                        active_nodes=3, off_nodes=("n4", "n5"))  # fmt: skip
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "down~", "idle~", "idle~"))  # n3 failed
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=1)
    r = a.run_pass(now=10.0)
    assert r.resume_failed == ["n3"] and r.powered_up == ["n4"], (r.powered_up, r.target_on)
    slurm._nodes = _nodes("allocated", "idle", "down~", "idle#", "idle~")  # n4 booting
    assert a.run_pass(now=40.0).lines == []  # one in n3's place, not one more each pass
    slurm._nodes = _nodes("allocated", "idle", "down~", "idle", "idle~")  # n4 up
    assert a.run_pass(now=70.0).lines == []  # kept on while that advice holds
    newer = adv.model_copy(update={"time": 60.0, "action": PowerAction.KEEP, "nodes": ()})
    a.advice = _Advice(newer)  # CES's next advice still has n4 off: it goes
    assert a.run_pass(now=80.0).powered_down == ["n4"]


def test_a_failed_node_powered_down_cleanly_is_retried_after_the_back_off() -> None:
    adv = PowerAdvisory(time=0.0, action=PowerAction.KEEP, count=0, reason="t",
                        active_nodes=3, off_nodes=())  # fmt: skip
    slurm = _AcceptingSlurm(_nodes("allocated", "idle", "down~"))
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=1, max_age_s=1e9)  # retry after 1 h
    assert a.run_pass(now=10.0).resume_failed == ["n3"]
    slurm._nodes = _nodes("allocated", "idle", "idle~")  # an admin resumed n3: idle~ again
    r = a.run_pass(now=20.0)
    assert r.resume_failed == ["n3"] and r.powered_up == []  # not yet: the back-off
    r = a.run_pass(now=3610.0)
    assert r.resume_failed == [] and r.powered_up == ["n3"]  # back in the plan, woken
    slurm._nodes = _nodes("allocated", "idle", "down~")  # and still broken: failed again
    assert a.run_pass(now=4000.0).newly_failed == ["n3"]
    slurm._nodes = _nodes("allocated", "idle", "down~")
    assert a.run_pass(now=9000.0).resume_failed == ["n3"]  # down~ is never retried


class _RefusingDowns(_AcceptingSlurm):
    """Slurm that refuses every power-down line (e.g. a node name it does not know)."""

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.applied.extend(lines)
        return ["Invalid node name specified"] if any("power_down" in ln for ln in lines) else []


def test_a_refused_line_reports_only_its_own_nodes_and_the_woken_ones_are_watched() -> None:
    # per-node advice: power n2 down, wake n4 (n3, n4 are off; the advice wants n4 on)
    adv = PowerAdvisory(time=0.0, action=PowerAction.POWER_DOWN, count=1, reason="t",
                        active_nodes=2, nodes=["n2"], off_nodes=["n2", "n3"])  # fmt: skip
    slurm = _RefusingDowns(_nodes("allocated", "idle", "idle~", "idle~"))
    a = PowerApplier(slurm, _Advice(adv), "c", min_idle=0, resume_timeout_s=100)
    r = a.run_pass(now=0.0)
    assert r.powered_down == [] and r.powered_up == ["n4"] and r.refused == 1
    assert r.refused_nodes == ["n2"] and r.as_dict()["refused_nodes"] == ["n2"]
    # the power-up went through, so n4 is watched: still off after the timeout -> failed
    slurm._nodes = _nodes("allocated", "idle", "idle~", "idle#")
    assert a.run_pass(now=150.0).newly_failed == ["n4"]
