"""``gpuhint agent`` (being built)."""

from __future__ import annotations

import argparse

from gpuhint.cli.common import UserError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser("agent", help="(not yet available)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise UserError("'agent' is not available in this build yet")
