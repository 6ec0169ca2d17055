"""``gpuhint kueue``: act on gpuhint's hints in a Kubernetes cluster running Kueue."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    add_fallback_args,
    applier_metrics,
    section_settings,
    settings_from,
)

DESCRIPTION = """\
Kueue admits the waiting Workload of highest priority first. apply-priorities gives
each waiting Job's Workload the WorkloadPriorityClass of its gpuhint hint: a ladder of
--classes classes it creates, gpuhint-00 (largest expected GPU-seconds, value --base)
up to gpuhint-NN (smallest), by log-spaced buckets between --min-service and
--max-service. It sets the Job's label kueue.x-k8s.io/priority-class, which Kueue copies
to the Workload's priority.

What it never touches: admitted Workloads (the patch also tests spec.suspend=true, so
a Job admitted meanwhile is refused by the API server), Jobs whose owner set another
priority class. Only Workloads whose class must change are
patched, at most --rate per second. In a ClusterQueue that may preempt, a Workload gets
at most a class strictly below the lowest admitted priority of its queue (its cohort),
so gpuhint never makes a preemptor (see docs/kubernetes.md).

A Job is linked to its hint by the label gpuhint.io/job-id, else its UID: the id the
agent's `--kubernetes kueue` source publishes.

Each waiting Workload is annotated with its expected start from the worker's forecast
(RFC 3339, UTC, to the minute; patched only when a value changes, at the same rate;
removed from a waiting Workload no forecast names any more):
  gpuhint.io/expected-start: 2026-12-05T14:05:00Z
  gpuhint.io/expected-start-band: 2026-12-05T13:40:00Z/2026-12-05T15:10:00Z   (80%)
  gpuhint.io/expected-start-asof: 2026-12-05T13:02:00Z

settings (flags override env vars):
  --kubeconfig / GPUHINT_KUEUE_KUBECONFIG     else in-cluster, else ~/.kube/config
  --cluster / GPUHINT_CLUSTER                 the gpuhint cluster name of the hints
  --redis-url / GPUHINT_REDIS_URL, GPUHINT_KEY_PREFIX
  GPUHINT_KUEUE_CLASSES, _BASE, _MIN_SERVICE_S, _MAX_SERVICE_S, _INTERVAL_S, _RATE,
  _BURST, _WORKERS (flags of the same names)
  --neutral / GPUHINT_KUEUE_NEUTRAL           median | midpoint | off | a rung (median)
  --stale-after / GPUHINT_KUEUE_STALE_AFTER_S  no sign of life for this long: fade (3600)
  --fade / GPUHINT_KUEUE_FADE_S               the fade takes this long (1800; 0: at once)
  --no-start-annotations / GPUHINT_KUEUE_START_ANNOTATIONS=false   no expected-start notes
"""

EPILOG = """\
examples:
  gpuhint kueue apply-priorities --cluster k8s --once --dry-run     what it would change
  gpuhint kueue apply-priorities --cluster k8s --once --json        one pass, a JSON report
  gpuhint kueue apply-priorities --cluster k8s                      the daemon (every 5 s)
turn it off: stop the daemon, then `gpuhint kueue apply-priorities --clear` removes
gpuhint's class from every waiting Job (they fall back to Kueue's default priority)
and its expected-start annotations from every waiting Workload.
"""

log = logging.getLogger("gpuhint.kueue")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "kueue",
        help="set Kueue Workload priorities from the hints",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ksub = p.add_subparsers(dest="kueue_command", metavar="ACTION", required=True)
    a = ksub.add_parser(
        "apply-priorities",
        help="map hints onto WorkloadPriorityClass labels of waiting Jobs",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("--once", action="store_true", help="one pass, then exit")
    a.add_argument("--dry-run", action="store_true", help="change nothing; say what would change")
    a.add_argument("--json", action="store_true", help="one JSON report per pass on stdout")
    a.add_argument(
        "--clear",
        action="store_true",
        help="remove gpuhint's classes and expected-start annotations from every waiting "
        "Job and exit (turning it off)",
    )
    a.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster)")
    a.add_argument("--context", help="kubeconfig context")
    a.add_argument("--cluster", help="gpuhint cluster name of the hints")
    a.add_argument("--redis-url", metavar="URL", help="Redis holding the hints")
    a.add_argument("--classes", type=int, metavar="N", help="classes in the ladder (10)")
    a.add_argument("--base", type=int, metavar="VALUE", help="priority of gpuhint-00 (0)")
    a.add_argument("--min-service", type=float, metavar="GPU_S", help="top-class bound (600)")
    a.add_argument("--max-service", type=float, metavar="GPU_S", help="bottom bound (5529600)")
    a.add_argument("--interval", type=float, metavar="SECONDS", help="between passes (5)")
    a.add_argument("--rate", type=float, metavar="PER_S", help="patches per second (20; 0: no cap)")
    a.add_argument("--burst", type=int, metavar="N", help="patch burst (50)")
    a.add_argument("--workers", type=int, metavar="N", help="concurrent patches (4)")
    add_fallback_args(a, "class")
    a.add_argument(
        "--no-start-annotations",
        dest="start_annotations",
        action="store_false",
        default=None,
        help="do not annotate waiting Workloads with their expected start",
    )
    a.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="/metrics and /healthz (docs/metrics.md)"
    )
    add_config_args(a)
    a.set_defaults(handler=run)


def _settings(args: argparse.Namespace) -> tuple[Any, Any]:
    from gpuhint.kueue.settings import KueueSettings, KueueSettingsError, load_kueue_settings

    common = settings_from(
        args, cluster=args.cluster, redis_url=args.redis_url, metrics_port=args.metrics_port
    )
    try:
        ks = load_kueue_settings(
            **section_settings(
                args,
                "kueue",
                set(KueueSettings.model_fields),
                kubeconfig=args.kubeconfig,
                context=args.context,
                classes=args.classes,
                base=args.base,
                min_service_s=args.min_service,
                max_service_s=args.max_service,
                interval_s=args.interval,
                rate=args.rate,
                burst=args.burst,
                workers=args.workers,
                neutral=args.neutral,
                stale_after_s=args.stale_after,
                fade_s=args.fade,
                start_annotations=args.start_annotations,
            )
        )
    except KueueSettingsError as exc:
        raise UserError(str(exc)) from None
    return common, ks


def run(args: argparse.Namespace) -> int:
    from redis.exceptions import RedisError

    from gpuhint.kueue.kube import KubeError

    common, ks = _settings(args)
    ladder = _ladder(ks)
    backend = _backend(ks)
    if args.clear:
        return _clear(backend, ladder, args)
    applier, hints = build_applier(args, common, ks, ladder, backend)
    record = _recorder(hints, common, args, ks)
    metrics = _metrics(common)
    try:
        if args.once:
            ensure_classes(applier, args.dry_run)
            backend.sync()
            one_pass(applier, args, record, metrics)
            return 0
        _serve_passes(applier, backend, args, metrics, record, common.cluster, ks)
    except KubeError as exc:
        raise UserError(f"Kubernetes API: {exc}") from None
    except (OSError, RedisError) as exc:  # Redis unreachable and the like
        raise UserError(f"cannot read hints from Redis: {exc}") from None
    return 0


def _ladder(ks: Any) -> Any:
    from gpuhint.kueue.policy import ClassLadder

    return ClassLadder(
        classes=ks.classes,
        base=ks.base,
        min_service_s=ks.min_service_s,
        max_service_s=ks.max_service_s,
    )


def _backend(ks: Any) -> Any:
    from gpuhint.kueue.kube import KubeError, KubeKueue, api_client

    try:
        return KubeKueue(api_client(ks.kubeconfig, ks.context))
    except KubeError as exc:
        raise UserError(str(exc)) from None


def build_applier(
    args: argparse.Namespace, common: Any, ks: Any, ladder: Any, backend: Any
) -> tuple[Any, Any]:
    """The Kueue applier of these settings and its hint reader (``gpuhint kueue
    apply-priorities`` and ``gpuhint serve --kueue``)."""
    from redis.exceptions import RedisError

    from gpuhint.kueue.applier import Applier
    from gpuhint.kueue.hints import hint_reader

    try:
        hints = hint_reader(common.redis_url.get_secret_value(), common.key_prefix)
    except ValueError as exc:
        raise UserError(f"Redis URL: {exc}") from None
    applier = Applier(
        backend,
        hints,
        common.cluster,
        ladder,
        rate=ks.rate,
        burst=ks.burst,
        workers=ks.workers,
        dry_run=args.dry_run,
        neutral=ks.neutral_mode,
        stale_after_s=ks.stale_after_s,
        fade_s=ks.fade_s,
        hint_errors=(RedisError, OSError),
        start_note=ks.start_annotations,
    )
    return applier, hints


def starter(applier: Any, backend: Any, dry_run: bool, stop: threading.Event) -> Any:
    """``start()``: the classes made and the caches listed and watched, once; until that
    has worked, each call tries again (an API server down at start is an outage, retried
    by the passes as a later one is, not the end of the daemon)."""
    started = False

    def start() -> None:
        nonlocal started
        if not started:
            ensure_classes(applier, dry_run)
            backend.watch(stop)  # the reflectors that started are not started again
            started = True

    return start


def ensure_classes(applier: Any, dry_run: bool) -> None:
    """Create (or fix) the ladder's WorkloadPriorityClasses; say which."""
    created = applier.ensure_classes()
    if created:
        log.info(
            "%s WorkloadPriorityClasses: %s",
            "would create/fix" if dry_run else "created/fixed",
            ", ".join(created),
        )


def one_pass(applier: Any, args: argparse.Namespace, record: Any, metrics: Any) -> Any:
    """One pass over the (synced) backend: recorded, counted and reported."""
    report = applier.run_pass()
    record(ok=True, result=report.to_json())
    _report(report, args, metrics)
    return report


def _recorder(hints: Any, common: Any, args: argparse.Namespace, ks: Any) -> Any:
    """``record(ok=..., result=... | error=...)``: the pass's record for ``gpuhint
    status`` (gpuhint/redis/applier_status.py); nothing in a dry run."""
    from functools import partial

    from gpuhint.redis.applier_status import record_pass

    if args.dry_run:
        return lambda **_kw: None
    return partial(
        record_pass, hints.r, common.keys, common.cluster, "kueue", interval_s=ks.interval_s
    )


def _serve_passes(
    applier: Any,
    backend: Any,
    args: argparse.Namespace,
    metrics: Any,
    record: Any,
    cluster: str,
    ks: Any,
) -> None:
    """A pass every interval (sooner on a change) until SIGTERM/SIGINT; an outage is
    logged once and retried, the labels left as they are."""
    from redis.exceptions import RedisError

    from gpuhint.kueue.kube import KubeError

    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping after this pass", signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
    start = starter(applier, backend, args.dry_run, stop)
    try:
        log.info(
            "applying hints of cluster %s to Kueue every %.3g s (%s)",
            cluster,
            ks.interval_s,
            "dry run" if args.dry_run else f"at most {ks.rate:g} patches/s",
        )
        failing: str | None = None
        while not stop.is_set():
            try:
                start()
                one_pass(applier, args, record, metrics)
                if failing:
                    log.info("passes succeed again")
                failing = None
            except (KubeError, RedisError, OSError) as exc:  # an outage: wait, retry
                if isinstance(exc, KubeError):
                    metrics.error("api")
                else:
                    metrics.redis_down()
                kind = type(exc).__name__
                record(ok=False, error=f"{kind}: {exc}")
                if failing != kind:  # once per outage, not every pass
                    log.warning(
                        "pass failed, retrying every %.3g s (labels left as they are): %s",
                        ks.interval_s,
                        exc,
                    )
                failing = kind
            except Exception as exc:  # a bug or an odd value: say it, keep the labels, retry
                metrics.error("internal")
                record(ok=False, error=f"{type(exc).__name__}: {exc}")
                if failing != "internal":
                    log.exception("pass failed, retrying (labels left as they are)")
                failing = "internal"
            # a pass every interval; a changed Workload / Job / queue brings it
            # forward (after 0.5 s, so a burst of changes makes one pass)
            if backend.wait_change(ks.interval_s):
                stop.wait(0.5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _metrics(settings: Any) -> Any:
    return applier_metrics("kueue", settings)


def _report(report: Any, args: argparse.Namespace, metrics: Any = None) -> None:
    if metrics is not None:
        if report.hints_from == "cache":
            metrics.error("redis")
        metrics.observe_kueue_pass(report)
    if args.json:
        print(json.dumps(report.to_json(), sort_keys=True), flush=True)
        return
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items())) or "none"
    verb = "would relabel" if report.dry_run else "relabelled"
    n = len(report.planned) if report.dry_run else report.relabelled
    line = (
        f"{report.workloads} workloads ({report.pending} waiting), {report.hints} hints, "
        f"{report.unhinted} without one: "
        f"{verb} {n}, unchanged {report.unchanged}, refused {report.refused}, "
        f"errors {report.errors}; skipped: {skipped} ({report.seconds:.2f} s)"
    )
    if args.once or report.relabelled or report.planned or report.errors:
        print(line, flush=True)
    for p in report.planned:
        service = p["expected_service_gpu_s"]
        why = "no hint: neutral" if service is None else f"{service:.0f} GPU-s"
        print(
            f"  {p['namespace']}/{p['job']}: {p['from'] or '-'} -> {p['to']} "
            f"(priority {p['priority']}, {why})"
        )
    if report.expected_start and (args.once or report.starts_annotated or report.starts_cleared):
        print(
            f"expected starts: {'would annotate' if report.dry_run else 'annotated'} "
            f"{report.starts_annotated}, cleared {report.starts_cleared}, "
            f"unchanged {report.starts_unchanged}",
            flush=True,
        )
    for p in report.planned_starts:
        start = p["annotations"].get("gpuhint.io/expected-start") or "(removed)"
        print(f"  {p['namespace']}/{p['workload']}: expected start {start}")


def _clear(backend: Any, ladder: Any, args: argparse.Namespace) -> int:
    """Remove gpuhint's class label from every waiting Job and its expected-start
    annotations from every waiting Workload (admitted ones are left)."""
    from gpuhint.kueue.applier import clear_all
    from gpuhint.kueue.kube import KubeError

    try:
        backend.sync()
    except KubeError as exc:
        raise UserError(f"Kubernetes API: {exc}") from None
    done = clear_all(backend, ladder, dry_run=args.dry_run)
    verb = "would clear" if args.dry_run else "cleared"
    failed = f"; {done.failed} failed (see the log), run it again" if done.failed else ""
    print(
        f"{verb} gpuhint's class on {done.classes} waiting Job(s) and the expected-start "
        f"annotations of {done.notes} waiting Workload(s){failed}",
        file=sys.stderr,
    )
    return 1 if done.failed else 0
