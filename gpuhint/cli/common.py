"""Helpers shared by the subcommands: user errors, trace loading, settings."""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuhint.lab.json_out import finite
from gpuhint.lab.traces.readers import OnError, TraceError, TraceRead, read_trace
from gpuhint.lab.traces.records import open_binary
from gpuhint.wire.command_config import section_values, unknown_env
from gpuhint.wire.config import ConfigError, Settings, config_path, load_settings


class UserError(Exception):
    """A mistake of the user's (bad file, bad flag): printed as one line, exit code 2."""


def one_line(msg: str) -> str:
    """A multi-line message (a pydantic error, say) as one line for a one-line error."""
    return " ".join(part.strip() for part in msg.splitlines() if part.strip())


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


def section_settings(
    args: argparse.Namespace, section: str, fields: set[str], **flags: Any
) -> dict[str, Any]:
    """A command's own settings (``[slurm]``, ``[kueue]``) as keyword arguments for its
    loader: the TOML file's values where neither a flag nor ``GPUHINT_<SECTION>_<NAME>``
    sets one (flags > environment > file > defaults), then the flags given."""
    try:
        from_file = section_values(config_path(getattr(args, "config", None)), section)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    env = {name.upper() for name in os.environ}
    out: dict[str, Any] = {}
    for name, value in from_file.items():
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(
                f"config file: [{section}] {name} is not a setting{guess}; "
                f"known: {', '.join(sorted(fields))}"
            )
        if f"GPUHINT_{section}_{name}".upper() not in env:
            out[name] = value
    out.update({k: v for k, v in flags.items() if v is not None})
    return out


def command_env_names() -> set[str]:
    """Every ``GPUHINT_<SECTION>_*`` name a command's own settings read."""
    from gpuhint.kueue.settings import KueueSettings
    from gpuhint.slurm.settings import SlurmSettings

    return {f"GPUHINT_SLURM_{f}".upper() for f in SlurmSettings.model_fields} | {
        f"GPUHINT_KUEUE_{f}".upper() for f in KueueSettings.model_fields
    }


def warn_unknown_env(log: logging.Logger) -> int:
    """Log one warning per ``GPUHINT_*`` variable nothing reads (a typo is otherwise
    silent); returns how many."""
    found = unknown_env(command_env_names())
    for name, close in found:
        guess = f"; did you mean {close}?" if close else ""
        log.warning("%s is not a gpuhint setting and is ignored%s", name, guess)
    return len(found)


Handler = Callable[[argparse.Namespace], int]


def add_trace_file_arg(p: argparse.ArgumentParser, help: str) -> None:
    """``--trace FILE``, the spelling of every command; a bare ``TRACE`` is kept as an
    alias where a command once took it positionally (wrap the handler with
    :func:`needs_trace`)."""
    p.add_argument("--trace", metavar="FILE", help=help)
    p.add_argument(
        "trace_positional", nargs="?", metavar="TRACE", help="the same as --trace (older form)"
    )


def needs_trace(handler: Handler) -> Handler:
    """``handler`` run with ``args.trace`` set from ``--trace`` or the positional alias."""

    def run(args: argparse.Namespace) -> int:
        flag, positional = args.trace, args.trace_positional
        if flag and positional and flag != positional:
            raise UserError(f"two traces given ({positional} and --trace {flag}); give one")
        if not (flag or positional):
            raise UserError("which trace? give --trace FILE")
        args.trace = flag or positional
        return handler(args)

    return run


def human_duration(seconds: float) -> str:
    """Seconds for a person: ``45 s``, ``12 min``, ``3.2 h``, ``4.1 d``, ``1,234 d``.

    >>> [human_duration(x) for x in (0.4, 45, 720, 11_520, 354_240, 106_617_600)]
    ['0.4 s', '45 s', '12 min', '3.2 h', '4.1 d', '1,234 d']
    """
    s = abs(seconds)
    if s < 10:
        return f"{seconds:.1f} s"
    if s < 120:
        return f"{seconds:.0f} s"
    if s < 7200:
        return f"{seconds / 60:.0f} min"
    if s < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    if s < 100 * 86400:
        return f"{seconds / 86400:.1f} d"
    return f"{seconds / 86400:,.0f} d"


def human_gpu_time(gpu_seconds: float) -> str:
    """GPU-seconds in the unit that reads best: ``90 GPU-s``, ``81.1 GPU-h``.

    >>> [human_gpu_time(x) for x in (90, 5_400, 292_066, 3.6e9)]
    ['90 GPU-s', '90 GPU-min', '81.1 GPU-h', '1,000,000 GPU-h']
    """
    g = abs(gpu_seconds)
    if g < 120:
        return f"{gpu_seconds:.0f} GPU-s"
    if g < 7200:
        return f"{gpu_seconds / 60:.0f} GPU-min"
    if g < 360_000:
        return f"{gpu_seconds / 3600:,.1f} GPU-h"
    return f"{gpu_seconds / 3600:,.0f} GPU-h"


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
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        raise UserError(f"{path}: not a regular file (a device or a pipe): save the trace first")
    try:
        read = read_trace(path, fmt, on_error, unique_ids=True)  # type: ignore[arg-type]
    except TraceError as exc:
        hint = (
            ""  # skipping cannot help: the format, or the document itself, is wrong
            if "unknown trace format" in exc.reason or on_error == "skip"
            else ("\n  (use --on-error skip to skip bad rows and report them)")
        )
        raise UserError(f"{exc}{hint}") from None
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a trace file") from None
    except UnicodeDecodeError as exc:
        line = _first_bad_utf8_line(p)
        where = f"{path}:{line}" if line else str(path)
        raise UserError(f"{where}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    except (OSError, EOFError, zlib.error) as exc:
        # unreadable, or a damaged / truncated gzip file
        raise UserError(f"{path}: cannot read: {exc}") from None
    if not read.jobs:
        why = "".join(f"\n  {left_out_line(n, r)}" for r, n in read.left_out.items())
        why += "".join(f"\n  skipped {e}" for e in read.errors[:5])
        if len(read.errors) > 5:
            why += f"\n  ... and {len(read.errors) - 5} more bad rows"
        raise UserError(f"{path}: no usable jobs in the trace{why}")
    return read


def _first_bad_utf8_line(path: Path) -> int | None:
    """The number of the first line of ``path`` (gunzipped) that is not UTF-8, if any."""
    try:
        with open_binary(path) as fh:
            for n, raw in enumerate(fh, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return n
    except (OSError, EOFError, zlib.error):
        return None
    return None


def left_out_line(n: int, why: str) -> str:
    """One reason valid records are no jobs of the trace, counted.

    >>> left_out_line(2, "pending or running (no history yet)")
    'left out 2 jobs: pending or running (no history yet)'
    """
    return f"left out {n:,} job{'s' if n != 1 else ''}: {why}"


def report_skipped(read: TraceRead, limit: int = 10) -> None:
    """Say on stderr which records were left out (by reason) and which rows skipped."""
    import sys

    for why, n in read.left_out.items():
        print(left_out_line(n, why), file=sys.stderr)
    for err in read.errors[:limit]:
        print(f"skipped {err}", file=sys.stderr)
    if len(read.errors) > limit:
        print(f"... and {len(read.errors) - limit} more bad rows skipped", file=sys.stderr)


def redis_store(settings: Settings) -> Any:
    """The worker's Redis store (counting what it writes), reachable, or a one-line error."""
    import redis

    from gpuhint.metrics.store import MeteredRedisStore

    try:
        store = MeteredRedisStore.from_url(
            settings.redis_url.get_secret_value(),
            keys=settings.keys,
            hint_ttl_s=settings.hint_ttl_s,
            advisory_ttl_s=settings.advisory_ttl_s,
            changes_maxlen=settings.changes_maxlen,
            watts_per_node=settings.ces_watts_per_node,
            slot_s=settings.ces_slot_s,
        )
        store.r.ping()
    except ValueError as exc:
        raise UserError(f"bad Redis URL: {exc}") from None
    except redis.RedisError as exc:
        raise UserError(f"cannot reach Redis ({type(exc).__name__}: {exc})") from None
    return store


def applier_metrics(kind: str, settings: Any) -> Any:
    """The applier's /metrics server (``kind``: slurm or kueue); a port in use is one line."""
    from gpuhint.metrics.applier import start_applier_metrics

    try:
        return start_applier_metrics(kind, settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        raise UserError(
            f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: "
            f"{exc.strerror or exc}"
        ) from None


def json_text(obj: Any, indent: int | None = None) -> str:
    """``obj`` as strict JSON (NaN and infinities as null), for ``--json`` outputs.

    >>> json_text({"a": float("nan"), "b": [1.0, float("inf")]})
    '{"a": null, "b": [1.0, null]}'
    """
    return json.dumps(finite(obj), indent=indent, allow_nan=False)


def plot_path(path: str) -> str:
    """Where a plot goes as matplotlib will write it: a name without an extension gets
    ``.png`` (so the path printed is the file written); an extension matplotlib cannot
    write is the user's mistake, said before any work.

    >>> plot_path("out/jct"), plot_path("out/jct."), plot_path("f.svg")
    ('out/jct.png', 'out/jct.png', 'f.svg')
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return f"{path.removesuffix('.')}.png"
    from matplotlib.figure import Figure

    kinds = Figure().canvas.get_supported_filetypes()
    if suffix not in kinds:
        names = ", ".join(sorted(kinds))
        raise UserError(f"cannot write a plot as .{suffix} ({path}): use one of {names}")
    return path


def name_arg(value: str) -> str:
    """An argparse ``type`` for a cluster or VC name as the wire contract takes it (1 to
    128 characters, no ``:`` or whitespace): a bad one is a usage error, not a
    traceback later."""
    from pydantic import TypeAdapter, ValidationError

    from gpuhint.wire.contract import Name

    try:
        return TypeAdapter(Name).validate_python(value)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a name: 1 to 128 characters, no ':' and no spaces"
        ) from None
