"""The CES power policy: how many nodes to keep powered on, one decision per slot. Pure.

Timing model: the observation of slot ``t`` (peak used nodes over the slot) arrives at
its end; the decision taken then sets the powered-on ("active") count for slot ``t+1``.
If ``used(t) > active(t)`` the slot had a *shortfall*: the policy wakes nodes at once.

It starts from the Helios artifact's rule (history and forecast thresholds, a buffer of
idle nodes kept on, a hold window after each wake, a minimum size of change) and changes
it where measurement showed it helps (docs/ces.md):

* the level kept on is ``ceil(forecast upper band) + min_buffer``: the buffer grows with
  the forecast's uncertainty instead of being a fixed count per cluster;
* it wakes *ahead* of a rise, as soon as the band reaches the powered-on count
  (the artifact only wakes after a shortfall);
* buffers and minimum change are fractions of the cluster (with a floor in nodes), so the
  same defaults serve 20 or 2,000 nodes.

Safety rules, always:

1. after every decision ``active >= min(total, used + min_buffer)`` (a *safety wake*
   ignores the rate limit and the hold window);
2. no power-down within ``hold_slots`` after a wake;
3. voluntary changes (power-downs and proactive wakes) are rate limited to
   ``max_changes_per_day`` in any rolling day, counting every change; a power-down also
   keeps one change in reserve for the wake that may follow it.

>>> from models.forecast import Forecast
>>> p = PowerPolicy(PowerPolicyConfig(), total=100)
>>> d = p.step(0, used=50, total=100, forecast=Forecast(0, 10800, 55, 50, 60, 100))
>>> d.action, d.active, d.count
('power_down', 61, 39)
>>> d = p.step(1, used=70, total=100, forecast=Forecast(600, 10800, 75, 70, 80, 100))
>>> d.action, d.active, d.reason.split(":")[0]
('wake', 81, 'safety')
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from models.forecast import Forecast

Action = Literal["power_down", "keep", "wake"]


@dataclass(frozen=True)
class PowerPolicyConfig:
    """Every knob of the policy. Node counts are ``max(*_nodes, ceil(*_frac * total))``."""

    slot_s: int = 600
    min_buffer_nodes: int = 1
    """Idle nodes always kept on beyond the used ones (floor of the buffer)."""
    min_buffer_frac: float = 0.01
    use_band: bool = True
    """Size the level from the forecast's upper band (else: used + buffer, as the artifact)."""
    buffer_nodes: int = 0
    """Artifact mode (``use_band=False``): fixed buffer; ignored when 0."""
    proactive_wake: bool = True
    """Wake when the forecast band reaches the powered-on count (before a shortfall)."""
    history_slots: int = 6
    history_threshold_frac: float = 0.0
    """Power down only if mean(used over the last ``history_slots``) - used >= this x total."""
    forecast_threshold_frac: float = 0.0
    """Artifact mode: power down only if used - forecast point >= this x total."""
    min_change_nodes: int = 1
    min_change_frac: float = 0.02
    """Smallest power-down worth making (hysteresis against flapping)."""
    hold_slots: int = 12
    """No power-down for this many slots after a wake (the artifact's ``keep``)."""
    max_changes_per_day: int = 3
    wake_margin_frac: float = 0.0
    """Extra nodes woken beyond the level, as a fraction of total (hysteresis)."""
    wake_margin_band: float = 0.0
    """Extra nodes woken beyond the level, in units of the forecast's band spread."""
    wake_on: str = "point"
    """Proactive wake when this forecast ("upper" band or "point") + min buffer > active."""
    watts_per_node: float = 700.0
    """Assumed draw of an idle powered-on GPU node, for energy estimates."""

    def min_buffer(self, total: int) -> int:
        return max(self.min_buffer_nodes, math.ceil(self.min_buffer_frac * total - 1e-9))

    def min_change(self, total: int) -> int:
        return max(self.min_change_nodes, math.ceil(self.min_change_frac * total - 1e-9))

    def __post_init__(self) -> None:
        if self.slot_s <= 0:
            raise ValueError("slot_s must be positive")
        if self.min_buffer_nodes < 0 or self.min_change_nodes < 1:
            raise ValueError("min_buffer_nodes must be >= 0 and min_change_nodes >= 1")
        if self.hold_slots < 0 or self.history_slots < 0:
            raise ValueError("hold_slots and history_slots must be >= 0")
        if self.max_changes_per_day < 1:
            raise ValueError("max_changes_per_day must be >= 1")
        if self.watts_per_node < 0:
            raise ValueError("watts_per_node must be >= 0")


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer at the end of slot ``slot``: ``active`` nodes for the next slot."""

    slot: int
    action: Action
    count: int
    active: int
    previous: int
    reason: str
    used: int
    total: int
    shortfall: int = 0
    """``used - active`` in the slot just observed, when positive."""
    forecast: Forecast | None = None
    level: int = 0
    """The powered-on level the policy aims at (forecast band + buffer)."""

    @property
    def changed(self) -> bool:
        return self.active != self.previous


@dataclass
class PolicyState:
    active: int
    last_wake_slot: int = -(10**9)
    changes: deque[int] = field(default_factory=deque)
    recent_used: deque[int] = field(default_factory=deque)


class PowerPolicy:
    """Stateful driver of the rule; ``step`` once per slot, in slot order."""

    def __init__(self, cfg: PowerPolicyConfig, total: int, active: int | None = None) -> None:
        self.cfg = cfg
        self.total = total
        self.state = PolicyState(active=total if active is None else min(active, total))
        self.per_day = max(1, round(86400 / cfg.slot_s))

    @property
    def active(self) -> int:
        return self.state.active

    def sync_active(self, active: int, total: int | None = None) -> None:
        """The cluster reports how many nodes are on (of ``total``, when given): trust it
        over our own plan. Nodes that joined are then already in ``active``: the next
        ``step`` must not add them again."""
        self.state.active = max(0, int(active))
        if total is not None:
            self.total = max(0, int(total))

    def level(self, used: int, total: int, fc: Forecast | None) -> int:
        """The powered-on count wanted for the next slots."""
        cfg = self.cfg
        buf = cfg.min_buffer(total)
        if not cfg.use_band or fc is None:
            lvl = used + max(buf, cfg.buffer_nodes)
        else:
            if not fc.warm:
                return total
            lvl = max(used, math.ceil(fc.upper - 1e-9)) + buf
        return min(total, lvl)

    def _margin(self, total: int, fc: Forecast | None) -> int:
        cfg = self.cfg
        m = cfg.wake_margin_frac * total
        if fc is not None and fc.warm:
            m += cfg.wake_margin_band * fc.spread
        return math.ceil(m - 1e-9)

    def _changes_in_day(self, slot: int) -> int:
        ch = self.state.changes
        while ch and ch[0] <= slot - self.per_day:
            ch.popleft()
        return len(ch)

    def step(self, slot: int, used: int, total: int, forecast: Forecast | None) -> Decision:
        """Decide at the end of ``slot`` (``used`` = its peak) the count for ``slot + 1``."""
        cfg, st = self.cfg, self.state
        used = max(0, int(used))
        total = max(int(total), used)
        if total != self.total:  # nodes joined (they boot on) or left the cluster
            st.active = max(0, st.active + max(0, total - self.total))
            self.total = total
        st.active = min(st.active, total)
        prev = st.active
        shortfall = max(0, used - prev)
        buf = cfg.min_buffer(total)
        floor = min(total, used + buf)
        lvl = self.level(used, total, forecast)
        n_changes = self._changes_in_day(slot)
        hist = st.recent_used
        hist_mean = sum(hist) / len(hist) if hist else float(used)
        recent_peak = max(hist) if hist else used
        hist.append(used)
        while len(hist) > cfg.history_slots:
            hist.popleft()

        action: Action = "keep"
        target = prev
        if prev < floor:
            target = min(total, max(lvl, floor) + self._margin(total, forecast))
            what = "shortfall" if shortfall else "below buffer"
            reason = (
                f"safety: {what}: used {used} + min buffer {buf} > active {prev}; wake to {target}"
            )
            action = "wake"
        elif (
            cfg.proactive_wake
            and cfg.use_band
            and forecast is not None
            and lvl > prev
            and math.ceil((forecast.upper if cfg.wake_on == "upper" else forecast.point) - 1e-9)
            > prev - buf
            and n_changes + 1 <= cfg.max_changes_per_day
        ):
            target = min(total, lvl + self._margin(total, forecast))
            reason = (
                f"rise ahead: forecast peak {forecast.point:.1f} (upper {forecast.upper:.1f}) "
                f"over {forecast.horizon_s / 3600:g} h nears active {prev}; wake to {target}"
            )
            action = "wake"
        else:
            # never below the recent peak + buffer: a dip of a slot or two (a job
            # restarting, a telemetry dropout) is no reason to power nodes down
            if cfg.use_band:
                lvl = max(lvl, min(total, recent_peak + buf))
            why_not = self._why_not_down(slot, used, total, forecast, lvl, prev, hist_mean)
            if why_not is not None:
                reason = why_not
            else:
                target = lvl
                reason = _down_reason(used, lvl, buf, forecast)
                action = "power_down"
        if action != "keep":
            st.active = target
            if target == prev:
                action = "keep"
            else:
                st.changes.append(slot)
                if action == "wake":
                    st.last_wake_slot = slot
        return Decision(
            slot=slot,
            action=action,
            count=abs(st.active - prev),
            active=st.active,
            previous=prev,
            reason=reason,
            used=used,
            total=total,
            shortfall=shortfall,
            forecast=forecast,
            level=lvl,
        )

    def _why_not_down(
        self,
        slot: int,
        used: int,
        total: int,
        fc: Forecast | None,
        lvl: int,
        prev: int,
        hist_mean: float,
    ) -> str | None:
        """Return why no power-down happens now, or None if one should."""
        cfg = self.cfg
        surplus = prev - lvl
        if surplus <= 0:
            return f"keep: level {lvl} >= active {prev}"
        if surplus < cfg.min_change(total):
            return f"keep: surplus {surplus} < minimum change {cfg.min_change(total)}"
        if slot - self.state.last_wake_slot < cfg.hold_slots:
            return "keep: hold window after a wake"
        if self._changes_in_day(slot) + 2 > cfg.max_changes_per_day:
            return f"keep: rate limit ({cfg.max_changes_per_day} changes/day, one kept for a wake)"
        if hist_mean - used < cfg.history_threshold_frac * total:
            return "keep: load not falling over the history window"
        if (
            not cfg.use_band
            and fc is not None
            and used - fc.point < cfg.forecast_threshold_frac * total
        ):
            return "keep: forecast rising"
        return None


def _down_reason(used: int, level: int, buf: int, forecast: Forecast | None) -> str:
    """Why ``level`` nodes stay on and the rest power down."""
    fc_txt = (
        f"forecast peak {forecast.point:.1f} (upper {forecast.upper:.1f}) "
        f"over {forecast.horizon_s / 3600:g} h"
        if forecast is not None
        else "no forecast"
    )
    return f"idle surplus: used {used}, {fc_txt}; keep {level} on (buffer {buf})"
