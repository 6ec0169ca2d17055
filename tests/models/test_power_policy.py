"""Safety rules of models/power_policy.py, property-style over random load sequences."""

from __future__ import annotations

import random

import pytest

from models.forecast import Forecast
from models.power_policy import Decision, PowerPolicy, PowerPolicyConfig


def _random_run(seed: int, cfg: PowerPolicyConfig, n: int = 400) -> list[Decision]:
    rng = random.Random(seed)
    total = rng.choice([4, 10, 47, 120, 420])
    used = rng.randint(0, total)
    pol = PowerPolicy(cfg, total)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.05:  # jumps, drops to zero (telemetry dropouts), bursts
            used = rng.randint(0, total)
        else:
            used = max(0, min(total, used + round(rng.gauss(0, max(1, total / 30)))))
        point = max(0.0, min(total, used + rng.gauss(0, total / 20)))
        up = min(float(total), point + abs(rng.gauss(0, total / 15)))
        lo = max(0.0, point - abs(rng.gauss(0, total / 15)))
        fc = Forecast(i * 600.0, 10800.0, point, lo, up, total, warm=rng.random() > 0.05)
        out.append(pol.step(i, used, total, fc))
    return out


CONFIGS = [
    PowerPolicyConfig(),
    PowerPolicyConfig(hold_slots=3, max_changes_per_day=2, min_change_frac=0.0),
    PowerPolicyConfig(min_buffer_nodes=3, wake_on="upper", wake_margin_band=1.0),
    PowerPolicyConfig(use_band=False, proactive_wake=False, buffer_nodes=5),
    PowerPolicyConfig(history_slots=0, max_changes_per_day=60, min_change_frac=0.0),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", range(25))
def test_safety_rules_hold(cfg: PowerPolicyConfig, seed: int) -> None:
    decisions = _random_run(seed, cfg)
    per_day = 144
    last_wake = -(10**9)
    changes: list[int] = []
    for d in decisions:
        # 1. never fewer than used + minimum buffer (capped by the cluster) after a decision
        assert d.active >= min(d.total, d.used + cfg.min_buffer(d.total)), d
        assert d.active <= d.total
        # 2. no power-down inside the hold window after a wake
        if d.changed and d.action == "power_down":
            assert d.slot - last_wake >= cfg.hold_slots, d
            assert d.active < d.previous
        if d.changed and d.action == "wake":
            last_wake = d.slot
            assert d.active > d.previous
        # 3. rate limit: a voluntary change only while the rolling day has room
        if d.changed:
            in_day = [s for s in changes if s > d.slot - per_day]
            if not d.reason.startswith("safety"):
                assert len(in_day) + 1 <= cfg.max_changes_per_day, d
            if d.action == "power_down":
                assert len(in_day) + 2 <= cfg.max_changes_per_day, d
            changes.append(d.slot)
        # the count is what changed
        assert d.count == abs(d.active - d.previous)


def test_shortfall_wakes_immediately() -> None:
    pol = PowerPolicy(PowerPolicyConfig(max_changes_per_day=1), total=100, active=40)
    fc = Forecast(0.0, 10800.0, 50, 45, 55, 100)
    pol.state.changes.append(0)  # rate budget spent: a shortfall must still wake
    d = pol.step(1, used=60, total=100, forecast=fc)
    assert d.action == "wake" and d.shortfall == 20 and d.active >= 61
    assert d.reason.startswith("safety: shortfall")


def test_proactive_wake_before_a_rise() -> None:
    pol = PowerPolicy(PowerPolicyConfig(), total=100, active=60)
    d = pol.step(0, used=50, total=100, forecast=Forecast(0.0, 10800.0, 62, 55, 70, 100))
    assert d.action == "wake" and d.shortfall == 0 and d.active >= 71
    assert d.reason.startswith("rise ahead")


def test_no_power_down_in_hold_window() -> None:
    cfg = PowerPolicyConfig(hold_slots=5, history_slots=0)
    pol = PowerPolicy(cfg, total=100, active=40)
    low = Forecast(0.0, 10800.0, 20, 15, 22, 100)
    assert pol.step(0, used=45, total=100, forecast=low).action == "wake"
    for i in range(1, 5):
        assert pol.step(i, used=20, total=100, forecast=low).action == "keep"
    assert pol.step(5, used=20, total=100, forecast=low).action == "power_down"


def test_dip_does_not_power_down_below_recent_peak() -> None:
    pol = PowerPolicy(PowerPolicyConfig(), total=100)
    fc = Forecast(0.0, 10800.0, 80, 75, 82, 100)
    for i in range(6):
        pol.step(i, used=80, total=100, forecast=fc)
    dip = Forecast(0.0, 10800.0, 2, 0, 5, 100)
    d = pol.step(6, used=0, total=100, forecast=dip)
    assert d.active >= 80 + pol.cfg.min_buffer(100)


def test_cold_forecast_keeps_everything_on() -> None:
    pol = PowerPolicy(PowerPolicyConfig(), total=50)
    d = pol.step(0, used=5, total=50, forecast=Forecast(0.0, 1.0, 5, 5, 6, 50, warm=False))
    assert d.action == "keep" and d.active == 50


def test_buffer_scales_with_cluster() -> None:
    cfg = PowerPolicyConfig()
    assert cfg.min_buffer(10) == 1 and cfg.min_buffer(420) == 5
    assert cfg.min_change(47) == 1 and cfg.min_change(420) == 9


@pytest.mark.parametrize(
    "bad", [{"max_changes_per_day": 0}, {"hold_slots": -1}, {"watts_per_node": -1.0}]
)
def test_config_validation(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PowerPolicyConfig(**bad)  # type: ignore[arg-type]
