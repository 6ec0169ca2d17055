"""``gpuhint``: one console script, one subcommand per job.

Each subcommand lives in ``gpuhint/cli/<name>.py`` and exposes ``register(subparsers)``;
heavy imports (Faust, River, matplotlib) happen inside the handlers so ``--help``
stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from gpuhint.cli.common import UserError, warn_unknown_env
from gpuhint.wire.version import VERSION as __version__

SUBCOMMANDS = (
    "demo",
    "replay",
    "worker",
    "serve",
    "hints",
    "status",
    "evaluate",
    "agent",
    "analyze",
    "slurm",
    "kueue",
)

DESCRIPTION = """\
gpuhint: QSSF priority hints and CES power advisories for GPU clusters.

Node agents and trace replays publish job events and GPU telemetry to Kafka; a
Faust worker keeps online models of job duration and cluster load and writes
priority hints and node power advisories to Redis, where any scheduler reads them.
"""

EPILOG = """\
start here:
  gpuhint demo                          replay a real Helios excerpt in-process (no Kafka/Redis)
  gpuhint serve --cluster C             one process for one Slurm cluster (no Kafka)
  gpuhint status                        is it working? Kafka, Redis, worker lag, hint age, appliers
  gpuhint hints --cluster C             the queues and power advice a scheduler reads in Redis
  gpuhint evaluate qssf --trace FILE    simulate FIFO/SJF/QSSF on a trace
  gpuhint evaluate ces --series FILE    replay a cluster load series through CES
  gpuhint analyze --trace FILE          your cluster from its trace, as the Helios paper

configuration: GPUHINT_* environment variables or a TOML file (--config / GPUHINT_CONFIG);
see docs/configuration.md and deploy/gpuhint.example.toml.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuhint",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpuhint {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"gpuhint.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `gpuhint`: what it can do, not a usage error
        parser.print_help()
        return 0
    env_level = os.environ.get("GPUHINT_LOG_LEVEL", "INFO").upper()
    if env_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        print(
            f"gpuhint: error: GPUHINT_LOG_LEVEL={env_level!r}: use DEBUG, INFO, WARNING or ERROR",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else getattr(logging, env_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose or env_level == "DEBUG":  # client libraries log their configuration,
        _redact_secrets()  # secrets included, at DEBUG (-v or GPUHINT_LOG_LEVEL=DEBUG)
    if not args.verbose:  # client libraries narrate every connection at INFO
        for noisy in ("kafka", "aiokafka", "faust.transport.producer"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        # Faust's changelog back-pressure warns on every table burst; it is not a fault.
        logging.getLogger("faust.transport.producer").setLevel(logging.ERROR)
    warn_unknown_env(logging.getLogger("gpuhint.wire.config"))
    try:
        rc = args.handler(args)
    except UserError as exc:
        print(f"gpuhint {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `gpuhint demo | head`: the reader has gone
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
    return int(rc or 0)


def _redact_secrets() -> None:
    """Mask secret values (SASL password, SSL key password, OAuth token) in every record
    the root logger's handlers write (:class:`streams.kafka_io.RedactSecrets`)."""
    try:
        from streams.kafka_io import redact_secrets_in_logs
    except ImportError:  # no Kafka client installed: nothing logs its configuration
        return
    redact_secrets_in_logs(*logging.getLogger().handlers)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
