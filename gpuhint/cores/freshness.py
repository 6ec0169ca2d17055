"""What an applier says about gpuhint's liveness: logged once per change of state.

Both appliers (Slurm's SiteFactor, Kueue's classes) read hints every pass; the state
(``fresh``, ``stale``: no sign of life for the staleness bound, ``redis_down``) is said
in the log only when it changes, not every pass.

>>> f = HintFreshness("c1", "jobs without a hint get the neutral factor")
>>> f.set("fresh", "ok"), f.set("fresh", "ok"), f.set("stale", "2 h"), f.state
(True, False, True, 'stale')
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class HintFreshness:
    """The last state an applier saw for one cluster's hints."""

    def __init__(self, cluster: str, consequence: str) -> None:
        self.cluster = cluster
        self.consequence = consequence
        """What the applier does while the hints are stale (said in the log)."""
        self.state: str | None = None

    def set(self, state: str, detail: str) -> bool:
        """Record ``state``; log it if it changed (return whether it did)."""
        if state == self.state:
            return False
        was, self.state = self.state, state
        if state == "fresh":
            if was is not None:
                log.warning("cluster %s: hints are fresh again (%s)", self.cluster, detail)
        elif state == "stale":
            log.warning(
                "cluster %s: no fresh hint (%s): is the worker, the agent or Kafka down? %s",
                self.cluster,
                detail,
                self.consequence,
            )
        else:
            log.warning("cluster %s: cannot read hints from Redis: %s", self.cluster, detail)
        return True

    def observe(self, age_s: float | None, stale_after_s: float) -> bool:
        """The cluster's last sign of life was ``age_s`` ago (None: none at all): set
        ``fresh`` or ``stale`` and return whether it is fresh."""
        if age_s is not None and age_s <= stale_after_s:
            self.set("fresh", f"newest sign of life {age_s:.0f} s ago")
            return True
        self.set(
            "stale",
            "no hint or load summary at all"
            if age_s is None
            else f"newest hint or load summary {age_s:.0f} s old",
        )
        return False
