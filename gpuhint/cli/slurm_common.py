"""The plumbing the Slurm appliers share (``gpuhint slurm apply-priorities`` /
``apply-power`` and ``gpuhint serve``): the common flags, the settings, the Redis client,
the status record, /metrics, Slurm's answer, the stop signals and a pass's output."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    applier_metrics,
    section_settings,
    settings_from,
)

log = logging.getLogger("gpuhint.slurm")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="gpuhint cluster name (else GPUHINT_CLUSTER)")
    p.add_argument("--redis-url", metavar="URL", help="Redis URL (else GPUHINT_REDIS_URL)")
    p.add_argument("--slurm-conf", metavar="FILE", help="slurm.conf (else SLURM_CONF)")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--dry-run", action="store_true", help="print the scontrol lines, run none")
    p.add_argument("--json", action="store_true", help="one JSON object per pass on stdout")
    p.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="/metrics and /healthz (docs/metrics.md)"
    )
    add_config_args(p)


FLAG_OF = {
    "interval_s": "--interval",
    "power_interval_s": "--interval",
    "max_factor": "--max-factor",
    "rate": "--rate",
    "max_updates": "--max-updates",
    "neutral": "--neutral",
    "stale_after_s": "--stale-after",
    "fade_s": "--fade",
    "min_idle": "--min-idle",
    "min_on": "--min-on",
    "advice_max_age_s": "--max-age",
    "exclude_nodes": "--exclude",
    "resume_timeout_s": "--resume-timeout",
}
"""The flag of each ``[slurm]`` setting on ``gpuhint slurm``'s commands (error messages)."""


def _settings(
    args: argparse.Namespace, flags: dict[str, str] | None = None, **slurm: Any
) -> tuple[Any, Any]:
    """gpuhint's and the Slurm appliers' settings; ``slurm``: the values of this
    command's flags by setting, ``flags``: their flag names where not :data:`FLAG_OF`'s."""
    from gpuhint.slurm.settings import SlurmSettings, SlurmSettingsError, load_slurm_settings

    fields = set(SlurmSettings.model_fields)

    settings = settings_from(
        args,
        cluster=args.cluster,
        redis_url=args.redis_url,
        metrics_port=getattr(args, "metrics_port", None),
    )
    try:
        ss = load_slurm_settings(
            **section_settings(args, "slurm", fields, conf=args.slurm_conf, **slurm)
        )
    except SlurmSettingsError as exc:
        given = slurm.get(exc.field)
        if given is None:
            raise UserError(str(exc)) from None
        flag = {**FLAG_OF, **(flags or {})}.get(exc.field, exc.field)
        raise UserError(f"{flag} {given}: {exc.reason}") from None
    if ss.conf is not None:
        from pathlib import Path

        if not Path(ss.conf).is_file():
            raise UserError(f"--slurm-conf {ss.conf}: no such file")
    return settings, ss


def _recorder(client: Any, settings: Any, name: str, interval_s: float, dry_run: bool) -> Any:
    """``record(result=None, exc=None)``: the pass's record for ``gpuhint status``."""
    from functools import partial

    from gpuhint.redis.applier_status import record_result

    r, keys, cluster = client.r, settings.keys, settings.cluster
    return partial(record_result, r, keys, cluster, name, interval_s, dry_run=dry_run)


def _client(settings: Any) -> Any:
    from gpuhint.redis.client import HintClient

    try:
        return HintClient.from_url(
            settings.redis_url.get_secret_value(), key_prefix=settings.key_prefix
        )
    except ValueError as exc:
        raise UserError(f"bad Redis URL: {exc}") from None


def _metrics(settings: Any) -> Any:
    return applier_metrics("slurm", settings)


def _check_slurm(cli: Any, *, once: bool = True) -> None:
    """Fail (exit 2) when Slurm's tools are missing, or, for one pass (``once``), when
    slurmctld does not answer. A daemon only warns: its passes retry with backoff, and
    exit 2 is what the systemd units never restart (RestartPreventExitStatus=2), so an
    applier started while slurmctld is down would otherwise stay down."""
    import shutil

    from gpuhint.slurm.commands import SlurmCommandError

    if shutil.which("scontrol", path=cli.env["PATH"]) is None:
        raise UserError("scontrol: command not found (install Slurm's client tools)")
    try:
        cli.run(["scontrol", "ping"])
    except SlurmCommandError as exc:
        if once:
            raise UserError(f"Slurm does not answer: {exc}") from None
        log.warning("Slurm does not answer yet: %s; the passes retry", exc)


def _stopper() -> tuple[threading.Event, Callable[[], None]]:
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping after this pass", signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return stop, restore


def _print_pass(result: Any, args: argparse.Namespace) -> None:
    """One applier pass: JSON (with the scontrol lines in a dry run), or the lines alone."""
    if args.json:
        doc = result.as_dict()
        if args.dry_run:
            doc["lines"] = [f"scontrol {ln}" for ln in result.lines]
        print(json.dumps(doc, sort_keys=True), flush=True)
    elif args.dry_run:
        for ln in result.lines:
            print(f"scontrol {ln}", flush=True)
    for err in result.errors[:5]:
        log.warning("Slurm refused: %s", err)
