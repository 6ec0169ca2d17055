"""Readers for cluster load series, resampled to fixed slots (CES input).

Two formats, plain or gzipped, detected from the header:

* ``nodes`` -- ``time,active,total`` per minute: ``active`` is the number of nodes
  running a job (the *used* nodes; CES calls powered-on nodes "active"), ``total`` the
  nodes in the cluster. This is the Helios artifact's ``philly_node_sequence.csv``.
* ``helios-vc`` -- the Helios per-VC ``cluster_sequence`` with ``running_gpu_num`` and
  ``total_gpu_num``; nodes = ceil(GPUs / ``gpus_per_node``) (8 by default).

Rows are resampled to ``slot_s`` slots (10 minutes by default) aligned to the UNIX
epoch (so to midnight UTC), taking the **maximum** over each slot, as the artifact does
(``df.resample("10min").max()``). A slot without any row takes the previous slot's
values (counted in ``LoadSeries.filled_slots``). A bad row raises :class:`SeriesError`
naming ``file:line`` and the reason, or is collected with ``on_error="skip"``.

>>> import io
>>> s = parse_series(io.StringIO("time,active,total\\n2020-01-01 00:00:00,3,10\\n"
...     "2020-01-01 00:05:00,5,10\\n2020-01-01 00:10:00,4,10\\n"), "x.csv")
>>> s.used, s.total, s.n_slots
([5, 4], [10, 10], 2)
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuhint.lab.traces.records import (
    OnError,
    TraceError,
    csv_rows,
    nonneg_number,
    open_text,
    parse_time,
)

SeriesFormat = Literal["auto", "nodes", "helios-vc"]

SLOT_S = 600
MAX_TIME_S = 7_258_118_400.0
"""2200-01-01 UTC: a later (or non-finite) time is an error, not years of slots to fill."""
MAX_GAP_S = 366 * 86400
"""A longer jump between two rows is an error (a unit mistake, a stray row), not up to
millions of slots to carry forward; a gap of days or months is a real outage, filled."""


class SeriesError(TraceError):
    """A row of a load series that cannot be read: ``path:line: reason``."""


@dataclass
class LoadSeries:
    """A cluster's load per slot: ``used[i]`` and ``total[i]`` nodes in slot ``i``.

    Slot ``i`` covers ``[start + i*slot_s, start + (i+1)*slot_s)`` (UNIX seconds, UTC).
    """

    name: str
    start: float
    slot_s: int
    used: list[int]
    total: list[int]
    fmt: str = ""
    rows: int = 0
    filled_slots: int = 0
    errors: list[SeriesError] = field(default_factory=list)

    @property
    def n_slots(self) -> int:
        return len(self.used)

    def slot_time(self, i: int) -> float:
        return self.start + i * self.slot_s

    def slice(self, lo: int, hi: int) -> LoadSeries:
        """Slots ``lo`` .. ``hi - 1`` as a new series."""
        return LoadSeries(
            self.name,
            self.slot_time(lo),
            self.slot_s,
            self.used[lo:hi],
            self.total[lo:hi],
            self.fmt,
        )


def _count(raw: str, col: str) -> int:
    return math.ceil(nonneg_number(raw, col) - 1e-9)


def _row_time(raw: str, last_t: float, last_line: int) -> float:
    """A row's time in UNIX seconds: finite, plausible, not before the row before (on
    ``last_line``) nor more than :data:`MAX_GAP_S` after it."""
    try:
        t = parse_time(raw)
    except ValueError:
        raise ValueError(f"time is not a time: {raw!r}") from None
    if not abs(t) <= MAX_TIME_S:  # NaN, inf, or ms taken for s: 1e9 slots to fill
        raise ValueError(f"time out of range (beyond year 2200 in UNIX seconds): {raw!r}")
    if t < last_t:
        raise ValueError("time goes backwards (rows must be sorted by time)")
    if last_line and t - last_t > MAX_GAP_S:
        raise ValueError(
            f"time jumps {(t - last_t) / 86400:,.0f} days after line {last_line} (more than "
            "a year: a unit mistake or a stray row?)"
        )
    return t


def detect_format(header: list[str]) -> str | None:
    cols = {c.strip().lower() for c in header}
    if {"time", "active", "total"} <= cols:
        return "nodes"
    if {"time", "running_gpu_num", "total_gpu_num"} <= cols:
        return "helios-vc"
    return None


def parse_series(
    fh: Iterable[str],
    path: str,
    fmt: SeriesFormat = "auto",
    on_error: OnError = "stop",
    slot_s: int = SLOT_S,
    gpus_per_node: int = 8,
) -> LoadSeries:
    """Parse an open text stream; see the module docstring for formats and rules."""
    if slot_s <= 0:
        raise ValueError("slot_s must be positive")
    reader = csv.reader(fh)
    try:
        header = next(reader)
    except StopIteration:
        raise SeriesError(path, 1, "empty file (expected a CSV header)") from None
    fmt, cols, (it, iu, itot) = _columns(header, path, fmt)
    width = max(it, iu, itot) + 1
    per_gpu = fmt == "helios-vc"

    slots: dict[int, list[int]] = {}
    errors: list[SeriesError] = []
    rows = 0
    last_t, last_line = -math.inf, 0
    end_line = reader.line_num
    for row in csv_rows(reader, path, SeriesError):
        # a quoted field may hold newlines: the row starts after the previous one ended
        lineno, end_line = end_line + 1, reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        try:
            if len(row) < width:
                raise ValueError(f"expected at least {width} fields, got {len(row)}")
            t = _row_time(row[it], last_t, last_line)
            used = _count(row[iu], cols[1])
            total = _count(row[itot], cols[2])
            if per_gpu:
                used = math.ceil(used / gpus_per_node)
                total = math.ceil(total / gpus_per_node)
            if used > total:
                raise ValueError(f"used nodes {used} exceed total nodes {total}")
        except ValueError as exc:
            err = SeriesError(path, lineno, str(exc))
            if on_error == "stop":
                raise err from None
            errors.append(err)
            continue
        last_t, last_line = t, lineno
        rows += 1
        k = int(t // slot_s)
        cur = slots.get(k)
        if cur is None:
            slots[k] = [used, total]
        else:
            if used > cur[0]:
                cur[0] = used
            if total > cur[1]:
                cur[1] = total
    if not slots:
        raise SeriesError(path, 2, "no usable rows")
    k0 = min(slots)
    used_l, total_l, filled = _fill_gaps(slots)
    name = Path(path).name.removesuffix(".gz").removesuffix(".csv")
    return LoadSeries(
        name=name,
        start=float(k0 * slot_s),
        slot_s=slot_s,
        used=used_l,
        total=total_l,
        fmt=fmt,
        rows=rows,
        filled_slots=filled,
        errors=errors,
    )


def _columns(
    header: list[str], path: str, fmt: SeriesFormat
) -> tuple[SeriesFormat, tuple[str, str, str], tuple[int, int, int]]:
    """The format (detected when ``auto``), its three columns and their positions."""
    detected = detect_format(header)
    if fmt == "auto":
        if detected is None:
            raise SeriesError(
                path,
                1,
                "unknown load-series header: expected time,active,total or a Helios "
                "sequence with time,running_gpu_num,total_gpu_num",
            )
        fmt = detected  # type: ignore[assignment]
    idx = {c.strip().lower(): i for i, c in enumerate(header)}
    if fmt == "nodes":
        cols = ("time", "active", "total")
    else:
        cols = ("time", "running_gpu_num", "total_gpu_num")
    missing = [c for c in cols if c not in idx]
    if missing:
        raise SeriesError(path, 1, f"header lacks column(s) {', '.join(missing)} for {fmt}")
    it, iu, itot = (idx[c] for c in cols)
    return fmt, cols, (it, iu, itot)


def _fill_gaps(slots: dict[int, list[int]]) -> tuple[list[int], list[int], int]:
    """Every slot from the first to the last: ``used``, ``total`` and how many slots
    without a row were filled with the slot before."""
    k0, k1 = min(slots), max(slots)
    used_l: list[int] = []
    total_l: list[int] = []
    filled = 0
    prev = slots[k0]
    for k in range(k0, k1 + 1):
        cur = slots.get(k)
        if cur is None:
            cur = prev
            filled += 1
        used_l.append(cur[0])
        total_l.append(cur[1])
        prev = cur
    return used_l, total_l, filled


def read_series(
    path: str | Path,
    fmt: SeriesFormat = "auto",
    on_error: OnError = "stop",
    slot_s: int = SLOT_S,
    gpus_per_node: int = 8,
) -> LoadSeries:
    """Read a load series file (plain or gzipped) and resample it to slots."""
    p = Path(path)
    with open_text(p) as fh:
        return parse_series(fh, str(path), fmt, on_error, slot_s, gpus_per_node)
