"""``gpuhint replay`` (being built)."""

from __future__ import annotations

import argparse

from gpuhint.cli.common import UserError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="(not yet available)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise UserError("'replay' is not available in this build yet")
