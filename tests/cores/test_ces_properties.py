"""Property tests of the node-count CES path end to end: CesEngine + LoadForecaster +
PowerPolicy over random load sequences (jumps, drops to zero, clusters of 1-3 nodes, a
cluster that grows or shrinks, the cluster's reported powered-on count)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker, SlotObservation
from gpuhint.wire.contract import NodeStatus
from models.forecast import LoadForecaster
from models.power_policy import Decision, PowerPolicyConfig


def _used_step(rng: random.Random, used: int, total: int) -> int:
    r = rng.random()
    if r < 0.05:
        return 0  # a telemetry dropout / everything finished
    if r < 0.12:
        return rng.randint(0, total)  # a jump
    return max(0, min(total, used + round(rng.gauss(0, max(1.0, total / 20)))))


def _run(seed: int, cfg: PowerPolicyConfig, n: int = 500) -> None:
    rng = random.Random(seed)
    total = rng.choice([1, 2, 3, 3, 12, 60])
    eng = CesEngine(
        None,
        cfg,
        lambda: LoadForecaster(horizon_slots=3, warmup_slots=rng.choice([0, 20])),
        emit_messages=False,
    )
    used, on = rng.randint(0, total), total
    last_wake, changes = -(10**9), list[int]()
    for i in range(n):
        if rng.random() < 0.04:  # nodes join (booting on) or leave
            delta = rng.choice([-2, -1, 1, 2, 5])
            on = max(0, on + max(delta, -min(on, total - 1)))
            total = max(1, total + delta)
        used = _used_step(rng, used, total)
        on = min(on, total)
        reported = on if rng.random() < 0.7 else None
        obs = SlotObservation(time=i * 600.0, used=used, total=total, active=reported)
        d = eng.observe(obs).decision
        if reported is not None:  # the reported count is what the decision starts from
            assert d.previous == min(reported, d.total), (i, d)
        buf = cfg.min_buffer(d.total)
        assert min(d.total, d.used + buf) <= d.active <= d.total, (i, d)
        if d.used > d.previous:
            assert d.action == "wake" and d.reason.startswith("safety"), (i, d)
        if d.changed and d.action == "power_down":
            assert d.slot - last_wake >= cfg.hold_slots, (i, d)
        if d.changed and d.action == "wake":
            last_wake = d.slot
        if d.changed:
            in_day = [s for s in changes if s > d.slot - 144]
            if not d.reason.startswith("safety"):
                assert len(in_day) + 1 <= cfg.max_changes_per_day, (i, d)
            if d.action == "power_down":
                assert len(in_day) + 2 <= cfg.max_changes_per_day, (i, d)
            changes.append(d.slot)
        on = d.active if rng.random() < 0.9 else rng.randint(0, total)  # usually followed


CONFIGS = [
    PowerPolicyConfig(),
    PowerPolicyConfig(hold_slots=3, max_changes_per_day=2, min_change_frac=0.0),
    PowerPolicyConfig(history_slots=0, max_changes_per_day=60, min_buffer_nodes=0),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", range(12))
def test_engine_safety_over_random_sequences(cfg: PowerPolicyConfig, seed: int) -> None:
    _run(seed, cfg)


def test_reported_active_is_not_grown_again_when_nodes_join() -> None:
    """The cluster reports 6 of 12 nodes on after 2 joined: the policy starts from 6."""
    cfg = PowerPolicyConfig(history_slots=0)
    eng = CesEngine(None, cfg, lambda: LoadForecaster(horizon_slots=3), emit_messages=False)
    eng.observe(SlotObservation(time=0.0, used=4, total=10, active=4))
    d = eng.observe(SlotObservation(time=600.0, used=6, total=12, active=6)).decision
    assert d.previous == 6
    assert d.active >= 6 + cfg.min_buffer(12) and d.action == "wake"


@pytest.mark.parametrize("total", [1, 2, 3])
def test_forecasts_finite_on_tiny_zero_and_constant_clusters(total: int) -> None:
    for pattern in ([0] * 300, [total] * 300, [0, total] * 150):
        f = LoadForecaster(horizon_slots=3, warmup_slots=10)
        for i, u in enumerate(pattern):
            fc = f.update(i * 600.0, u, total)
            for v in (fc.point, fc.lower, fc.upper):
                assert math.isfinite(v) and 0.0 <= v <= total
            assert fc.lower <= fc.point <= fc.upper


def test_engine_pickle_round_trip_keeps_decisions() -> None:
    rng = random.Random(5)
    eng = CesEngine(None, PowerPolicyConfig(), emit_messages=False)
    used = 30
    outs_a: list[Decision] = []
    outs_b: list[Decision] = []
    obs: list[SlotObservation] = []
    for i in range(400):
        used = _used_step(rng, used, 60)
        obs.append(SlotObservation(time=i * 600.0, used=used, total=60))
    for o in obs[:250]:
        eng.observe(o)
    copy = pickle.loads(pickle.dumps(eng.clusters))
    for o in obs[250:]:
        outs_a.append(eng.observe(o).decision)
    eng.clusters = copy
    for o in obs[250:]:
        outs_b.append(eng.observe(o).decision)
    assert [(d.action, d.active) for d in outs_a] == [(d.action, d.active) for d in outs_b]


def test_a_late_older_node_status_does_not_undo_a_newer_one() -> None:
    """Node a reports busy every 10 s; a copy of its 450 s report arrives after the
    595 s one. It must stay on and used, not turn stale, off and named in a wake."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=120)
    for s in range(0, 600, 5):
        t.on_node_status(NodeStatus(node="a", time=s, num_gpus=8, busy_gpus=8))
        t.on_node_status(NodeStatus(node="b", time=s, num_gpus=8, busy_gpus=0))
    t.on_node_status(NodeStatus(node="a", time=450, num_gpus=8, busy_gpus=8))  # late
    (obs,) = t.on_node_status(NodeStatus(node="b", time=605, num_gpus=8))
    assert (obs.used, obs.active, obs.off_nodes) == (1, 2, ())
    step = CesEngine(None).observe(obs)
    assert "a" not in step.advisories[0].nodes
