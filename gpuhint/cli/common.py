"""Helpers shared by the subcommands: user errors, trace loading, settings."""

from __future__ import annotations

import argparse
import zlib
from pathlib import Path
from typing import Any

from gpuhint.lab.traces.readers import OnError, TraceError, TraceRead, read_trace
from gpuhint.wire.config import ConfigError, Settings, load_settings


class UserError(Exception):
    """A mistake of the user's (bad file, bad flag): printed as one line, exit code 2."""


def add_fallback_args(p: argparse.ArgumentParser, what: str) -> None:
    """An applier's options for jobs without a (fresh) hint (docs/operations.md,
    *gpuhint is down*); ``what`` is the value it sets, e.g. ``factor``."""
    p.add_argument(
        "--neutral",
        metavar="MODE",
        help=f"{what} of a job without a hint: median, midpoint, off or a number (median)",
    )
    p.add_argument(
        "--stale-after", type=float, metavar="S", help="hints fade after S s without news (3600)"
    )
    p.add_argument("--fade", type=float, metavar="S", help="the fade takes S s (1800)")


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML settings file (else $GPUHINT_CONFIG)")


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    try:
        return load_settings(getattr(args, "config", None), **overrides)
    except ConfigError as exc:
        raise UserError(str(exc)) from None


def add_trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=["auto", "helios", "philly", "plain", "sacct", "sacct-json"],
        default="auto",
        help="trace format (default: detect from name and header)",
    )
    add_on_error_arg(p)


def add_on_error_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--on-error",
        choices=["stop", "skip"],
        default="stop",
        help="bad rows: stop at the first (default) or skip and report each",
    )


def load_trace(path: str | Path, fmt: str = "auto", on_error: OnError = "stop") -> TraceRead:
    """Read a trace, turning file problems into :class:`UserError`."""
    try:
        read = read_trace(path, fmt, on_error)  # type: ignore[arg-type]
    except TraceError as exc:
        hint = (
            ""
            if "unknown trace format" in exc.reason
            else ("\n  (use --on-error skip to skip bad rows and report them)")
        )
        raise UserError(f"{exc}{hint}") from None
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a trace file") from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        # unreadable, or a damaged / truncated gzip file
        raise UserError(f"{path}: cannot read: {exc}") from None
    if not read.jobs:
        raise UserError(f"{path}: no usable jobs in the trace")
    return read


def report_skipped(read: TraceRead, limit: int = 10) -> None:
    import sys

    for err in read.errors[:limit]:
        print(f"skipped {err}", file=sys.stderr)
    if len(read.errors) > limit:
        print(f"... and {len(read.errors) - limit} more bad rows skipped", file=sys.stderr)
