"""``gpuhint worker`` (being built)."""

from __future__ import annotations

import argparse

from gpuhint.cli.common import UserError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="(not yet available)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise UserError("'worker' is not available in this build yet")
