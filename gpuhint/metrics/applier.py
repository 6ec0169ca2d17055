"""Counters for the Slurm and Kueue appliers, and their ``/metrics`` + ``/healthz``.

An applier makes one :class:`ApplierMetrics` and calls it as it works; label values
must come from a small fixed set (an action or reason *class*, never a job id).

>>> m = ApplierMetrics("slurm")
>>> m.action("set_priority", 3)          # three jobs re-prioritized
>>> m.refusal("already_running")         # a job it was asked about but must not touch
>>> m.error("scheduler")                 # a failed scontrol / API call
>>> m.pass_done(seconds=0.8, pending=120, changed=3)
>>> m.health()[0]
True
>>> m.value("gpuhint_applier_actions_total", action="set_priority")
3.0

``m.serve(host, port)`` starts the HTTP endpoints (see docs/metrics.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from gpuhint.metrics.server import MetricsServer


class ApplierMetrics:
    """The metrics of one applier (``applier`` = ``slurm``, ``kueue``, ...)."""

    def __init__(
        self,
        applier: str,
        registry: CollectorRegistry | None = None,
        stale_after_s: float = 300.0,
    ) -> None:
        self.applier = applier
        self.registry = registry or CollectorRegistry()
        self.stale_after_s = stale_after_s
        self._add_pass_metrics(self.registry, ["applier"])
        self._add_hint_metrics(self.registry, ["applier"])
        self._lock = threading.Lock()
        self._last_pass: float | None = None
        self._process_registered = False

    def _add_pass_metrics(self, r: CollectorRegistry, labels: list[str]) -> None:
        """What the passes did: changes, refusals, errors, durations, the last pass."""
        self._actions = Counter(
            "gpuhint_applier_actions",
            "Changes an applier made in the scheduler, by action.",
            [*labels, "action"],
            registry=r,
        )
        self._refusals = Counter(
            "gpuhint_applier_refusals",
            "Changes an applier declined to make (admitted / running job, rate limit, "
            "dry run, ...), by reason.",
            [*labels, "reason"],
            registry=r,
        )
        self._errors = Counter(
            "gpuhint_applier_errors",
            "Failed calls, by what failed (redis, scheduler, api, ...).",
            [*labels, "kind"],
            registry=r,
        )
        self._pass = Histogram(
            "gpuhint_applier_pass_seconds",
            "Duration of one applier pass over the pending jobs.",
            labels,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self._pending = Gauge(
            "gpuhint_applier_pending_jobs",
            "Pending jobs seen by the last pass.",
            labels,
            registry=r,
        )
        self._changed = Gauge(
            "gpuhint_applier_last_pass_changed",
            "Jobs changed by the last pass.",
            labels,
            registry=r,
        )
        self._last = Gauge(
            "gpuhint_applier_last_pass_timestamp_seconds",
            "When the last pass finished (UNIX seconds).",
            labels,
            registry=r,
        )

    def _add_hint_metrics(self, r: CollectorRegistry, labels: list[str]) -> None:
        """How fresh the hints were and what the neutral priority did."""
        self._fresh = Gauge(
            "gpuhint_applier_hints_fresh",
            "1 while the cluster shows life (a hint or load summary newer than the "
            "applier's stale_after), 0 when no hint is fresh (worker, agent or Kafka "
            "down: hints fade to the neutral priority).",
            labels,
            registry=r,
        )
        self._age = Gauge(
            "gpuhint_applier_hint_age_seconds",
            "Age of the cluster's newest hint or load summary at the last pass (NaN: none at all).",
            labels,
            registry=r,
        )
        self._redis_up = Gauge(
            "gpuhint_applier_redis_up",
            "1 when the last pass read the hints from Redis, 0 when Redis failed "
            "(the pass used the hints it read last, or changed nothing).",
            labels,
            registry=r,
        )
        self._unhinted = Gauge(
            "gpuhint_applier_unhinted_jobs",
            "Pending jobs without a hint at the last pass (given the neutral priority).",
            labels,
            registry=r,
        )
        self._faded = Gauge(
            "gpuhint_applier_faded_jobs",
            "Hinted pending jobs whose priority was faded towards the neutral one "
            "(stale hints) at the last pass.",
            labels,
            registry=r,
        )
        self._neutral = Gauge(
            "gpuhint_applier_neutral_priority",
            "The neutral priority of the last pass (Slurm: SiteFactor; Kueue: the class value).",
            labels,
            registry=r,
        )
        self._neutral_set = Counter(
            "gpuhint_applier_neutral_assignments",
            "Jobs without a hint moved to the neutral priority.",
            labels,
            registry=r,
        )

    def action(self, action: str, n: int = 1) -> None:
        """``n`` changes of kind ``action`` were made (e.g. ``set_priority``)."""
        if n:
            self._actions.labels(self.applier, action).inc(n)

    def refusal(self, reason: str, n: int = 1) -> None:
        """``n`` changes were not made, for ``reason`` (e.g. ``admitted``, ``rate_limited``)."""
        if n:
            self._refusals.labels(self.applier, reason).inc(n)

    def error(self, kind: str, n: int = 1) -> None:
        """A call failed (``kind``: ``redis``, ``scheduler``, ``api``...)."""
        if n:
            self._errors.labels(self.applier, kind).inc(n)

    def pass_done(self, seconds: float, pending: int | None, changed: int) -> None:
        """One pass finished: how long it took, how many jobs it saw (None: not a job
        pass) and how many things it changed."""
        self._pass.labels(self.applier).observe(seconds)
        if pending is not None:
            self._pending.labels(self.applier).set(pending)
        self._changed.labels(self.applier).set(changed)
        now = time.time()
        self._last.labels(self.applier).set(now)
        with self._lock:
            self._last_pass = now

    def fallback(
        self,
        *,
        fresh: bool,
        age_s: float | None,
        redis_up: bool,
        unhinted: int,
        faded: int,
        neutral: int | None,
        neutral_set: int,
    ) -> None:
        """How fresh the hints were and what got the neutral priority in the last pass."""
        a = self.applier
        self._fresh.labels(a).set(1 if fresh else 0)
        self._age.labels(a).set(float("nan") if age_s is None else age_s)
        self._redis_up.labels(a).set(1 if redis_up else 0)
        self._unhinted.labels(a).set(unhinted)
        self._faded.labels(a).set(faded)
        if neutral is not None:
            self._neutral.labels(a).set(neutral)
        if neutral_set:
            self._neutral_set.labels(a).inc(neutral_set)

    def redis_down(self) -> None:
        """A pass failed because Redis did not answer (and changed nothing)."""
        self.error("redis")
        self._redis_up.labels(self.applier).set(0)

    # -- the appliers' pass results, mapped once here ---------------------------------
    def observe_kueue_pass(self, report: Any) -> None:
        """A ``gpuhint.kueue.applier.PassReport``."""
        if report.dry_run:
            self.refusal("dry_run", len(report.planned))
        else:
            self.action("relabel", report.relabelled)
        self.refusal("admitted_meanwhile", report.refused)
        for why, n in sorted(report.skipped.items()):
            self.refusal(str(why).replace("-", "_"), n)
        self.error("api", report.errors)
        if report.expected_start:
            self._observe_starts(
                report.dry_run,
                {"start_set": report.starts_annotated, "start_cleared": report.starts_cleared},
            )
        self.fallback(
            fresh=report.hints_fresh,
            age_s=report.hint_age_s,
            redis_up=report.hints_from == "redis",
            unhinted=report.unhinted,
            faded=report.faded,
            neutral=report.neutral_value,
            neutral_set=0 if report.dry_run else report.neutral_set,
        )
        self.pass_done(report.seconds, report.pending, report.relabelled)

    def observe_slurm_priorities(self, result: Any, dry_run: bool) -> None:
        """A ``gpuhint.slurm.priority.PassResult``."""
        if dry_run:
            self.refusal("dry_run", result.updated)
        else:
            self.action("set_site_factor", result.updated)
        self.refusal("pinned", result.skipped_pinned)
        self.refusal("held", result.skipped_held)
        self.refusal("rate_limited", result.deferred)
        self.refusal("slurm_refused", result.refused)
        if result.start_comment:
            c = result.comments
            self._observe_starts(
                dry_run,
                {"start_set": c["comments_set"], "start_cleared": c["comments_cleared"]},
            )
            self.refusal("user_comment_kept", c["comments_user_kept"])
            self.refusal("start_rate_limited", c["comments_deferred"])
            self.refusal("start_refused", c["comments_refused"])
        self.fallback(
            fresh=result.hints_fresh,
            age_s=result.hint_age_s,
            redis_up=result.hints_from == "redis",
            unhinted=result.pending_unhinted,
            faded=result.faded,
            neutral=result.neutral_factor,
            neutral_set=0 if dry_run else result.neutral_set,
        )
        self.pass_done(result.seconds, result.pending_hinted, result.updated)

    def _observe_starts(self, dry_run: bool, changes: dict[str, int]) -> None:
        """Expected starts written where users look (Slurm: the job's Comment; Kueue: the
        Workload's annotations): ``start_set`` / ``start_cleared`` actions."""
        for action, n in changes.items():
            if dry_run:
                self.refusal("dry_run", n)
            else:
                self.action(action, n)

    def observe_slurm_power(self, result: Any, seconds: float, dry_run: bool) -> None:
        """A ``gpuhint.slurm.power.PowerResult`` and how long its pass took."""
        down, up = len(result.powered_down), len(result.powered_up)
        if dry_run:
            self.refusal("dry_run", down + up)
        else:
            self.action("power_down", down)
            self.action("power_up", up)
        self.refusal("slurm_refused", result.refused)
        self.refusal("held_back", result.held_back)
        self.refusal("resume_failed", len(result.newly_failed))
        self.pass_done(seconds, None, down + up)

    def health(self) -> tuple[bool, str]:
        """Ready when a pass finished within ``stale_after_s``."""
        with self._lock:
            last = self._last_pass
        if last is None:
            return False, "no pass finished yet"
        age = time.time() - last
        if age > self.stale_after_s:
            return False, f"last pass finished {age:.0f} s ago"
        return True, f"last pass {age:.1f} s ago"

    def value(self, name: str, **labels: str) -> float:
        """The current value of one sample (for tests and logs); 0 when never set."""
        got = self.registry.get_sample_value(name, {"applier": self.applier, **labels})
        return 0.0 if got is None else got

    def serve(self, host: str = "0.0.0.0", port: int = 9400) -> MetricsServer:
        """Start ``/metrics`` and ``/healthz`` (raises OSError when the port is taken)."""
        if not self._process_registered:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            self._process_registered = True
        return MetricsServer(self.registry, health=self.health, host=host, port=port).start()


def start_applier_metrics(applier: str, host: str, port: int | None) -> ApplierMetrics:
    """The applier's metrics, served on ``host:port`` unless ``port`` is None.

    Raises ``OSError`` when the port cannot be bound.
    """
    metrics = ApplierMetrics(applier)
    if port is not None:
        metrics.serve(host, port)
    return metrics
