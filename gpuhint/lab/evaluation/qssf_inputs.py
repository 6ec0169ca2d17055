"""The side inputs of ``gpuhint evaluate qssf``: VC sizes, given priorities, and the
checks that a trace's GPU jobs fit their VCs (:mod:`gpuhint.lab.evaluation.qssf`)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuhint.lab.traces.readers import TraceJob
from models.simulator import SimJob

GPUS_PER_NODE = 8
MAX_NODES = 100_000
"""Nodes one VC (or pool) may have: more is a typo or a tiny target load, not a cluster,
and the simulators would fill memory or run for hours with it."""


class InputError(ValueError):
    """A bad line in a side file (VC sizes, priorities): ``path:line: reason``."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")


def _open_csv_rows(path: str | Path) -> list[tuple[int, list[str]]]:
    p = Path(path)
    try:
        with open(p, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            return [(reader.line_num, row) for row in reader]
    except UnicodeDecodeError as exc:
        with open(p, "rb") as fb:
            line = next((n for n, raw in enumerate(fb, 1) if not _is_utf8(raw)), 0)
        raise InputError(str(p), line, f"not UTF-8 text ({exc.reason})") from None
    except (OSError, csv.Error) as exc:
        raise InputError(str(p), 0, str(exc)) from None


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_vc_config(path: str | Path) -> dict[str, int]:
    """Nodes per VC from a two-column CSV with a header (``vc,nodes``; the artifact's
    ``,num`` files read as they are).

    >>> import tempfile, os
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    >>> _ = f.write(",num\\nvcA,20\\nvcB,2\\n"); f.close()
    >>> read_vc_config(f.name)
    {'vcA': 20, 'vcB': 2}
    >>> os.unlink(f.name)
    """
    rows = _open_csv_rows(path)
    if not rows:
        raise InputError(str(path), 1, "empty file: expected a header then vc,nodes rows")
    sizes: dict[str, int] = {}
    for line, row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < 2:
            raise InputError(str(path), line, f"expected vc,nodes, got {','.join(row)!r}")
        vc, raw = row[0].strip(), row[1].strip()
        if not vc:
            raise InputError(str(path), line, "missing VC name")
        try:
            nodes = int(raw)
        except ValueError:
            raise InputError(
                str(path), line, f"nodes must be a whole number, got {raw!r}"
            ) from None
        if not 0 <= nodes <= MAX_NODES:
            raise InputError(str(path), line, f"nodes must be 0..{MAX_NODES:,}, got {nodes:,}")
        if vc in sizes:
            raise InputError(str(path), line, f"VC {vc!r} listed twice")
        sizes[vc] = nodes
    return sizes


def read_priorities(path: str | Path) -> dict[str, float]:
    """``job_id,priority`` (header required; other columns ignored); smaller runs first."""
    rows = _open_csv_rows(path)
    if not rows:
        raise InputError(str(path), 1, "empty file: expected a job_id,priority header")
    header = [c.strip().lower() for c in rows[0][1]]
    if "job_id" not in header or "priority" not in header:
        raise InputError(
            str(path), rows[0][0], f"header must name job_id and priority, got {rows[0][1]!r}"
        )
    ji, pi = header.index("job_id"), header.index("priority")
    out: dict[str, float] = {}
    for line, row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) <= max(ji, pi):
            raise InputError(
                str(path), line, f"{len(row)} fields where the header has {len(header)}"
            )
        job_id, raw = row[ji].strip(), row[pi].strip()
        if not job_id:
            raise InputError(str(path), line, "missing job_id")
        try:
            prio = float(raw)
        except ValueError:
            raise InputError(str(path), line, f"priority is not a number: {raw!r}") from None
        if not math.isfinite(prio):
            raise InputError(str(path), line, f"priority must be finite, got {raw!r}")
        if job_id in out:
            raise InputError(str(path), line, f"job {job_id!r} listed twice")
        out[job_id] = prio
    return out


def check_fit(jobs: Sequence[TraceJob], sizes: Mapping[str, int], sized: Mapping[str, str]) -> None:
    """Refuse a trace whose GPU job could never run in its VC (a user's input error)."""
    for j in jobs:
        cap = sizes[j.vc] * GPUS_PER_NODE
        if j.num_gpus > cap:
            raise InputError(
                "VC config",
                0,
                f"job {j.job_id} (trace line {j.line}) needs {j.num_gpus} GPUs but VC "
                f"{j.vc!r} has {sizes[j.vc]} nodes ({cap} GPUs, {sized[j.vc]}): it could "
                "never run; give the VC more nodes",
            )


def sim_job(j: TraceJob) -> SimJob:
    """A trace job as the simulator takes it."""
    return SimJob(j.job_id, j.submit_time, j.duration, j.num_gpus)
