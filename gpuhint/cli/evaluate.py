"""``gpuhint evaluate``: prove the models offline on real traces and load series.

``evaluate qssf`` lives in ``gpuhint/cli/evaluate_qssf.py`` and ``evaluate ces`` in
``gpuhint/cli/evaluate_ces.py``; each exposes ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

EVALUATIONS = ("qssf", "ces", "slurm")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "evaluate",
        help="evaluate QSSF (job completion time) or CES (utilization) on real data",
        description="Replay real data through the online models exactly as the worker "
        "would (no look-ahead) and measure what they are worth.",
    )
    inner = p.add_subparsers(dest="evaluation", metavar="WHAT", required=True)
    for name in EVALUATIONS:
        importlib.import_module(f"gpuhint.cli.evaluate_{name}").register(inner)


def plot_target(path: str) -> str:
    """:func:`gpuhint.cli.common.plot_path`, and its folder must exist and be writable:
    said before the run, which can take long, not after it (its results lost)."""
    from gpuhint.cli.common import UserError, plot_path

    path = plot_path(path)
    folder = Path(path).parent
    if not folder.is_dir():
        raise UserError(f"cannot save plot {path}: no such folder {str(folder)!r}")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot save plot {path}: folder {str(folder)!r} is not writable")
    return path
