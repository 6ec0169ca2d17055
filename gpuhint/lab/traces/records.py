"""What every trace reader shares: the job record, ``file:line`` errors, text and time parsing.

The format readers (:mod:`.readers`, :mod:`.sacct`, :mod:`.loadseries`) build on it.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal, TextIO

from gpuhint.wire.contract import JobState

OnError = Literal["stop", "skip"]


class TraceError(ValueError):
    """A record of a trace that cannot be read: ``path:line: reason``."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, normalized. Times are UNIX seconds; ``duration`` is run time."""

    job_id: str
    submit_time: float
    duration: float
    num_gpus: int
    vc: str = "default"
    user: str | None = None
    name: str | None = None
    num_cpus: int | None = None
    num_nodes: int | None = None
    state: JobState = JobState.COMPLETED
    start_time: float | None = None
    line: int = 0
    time_limit_s: float | None = None

    @property
    def service(self) -> float:
        """GPU-seconds: the quantity QSSF ranks by."""
        return self.num_gpus * self.duration


@dataclass
class TraceRead:
    jobs: list[TraceJob]
    errors: list[TraceError] = field(default_factory=list)
    fmt: str = ""


def open_binary(path: Path) -> BinaryIO:
    """Open a file's bytes for reading; gunzipped if it is gzipped (by its magic bytes)."""
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")  # type: ignore[return-value]


def open_text(path: Path) -> TextIO:
    """Open a UTF-8 text file for reading (a BOM skipped); gunzip it if it is gzipped."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", newline="")


def parse_time(value: str) -> float:
    """``YYYY-MM-DD HH:MM:SS`` (UTC, no zone) or a number of seconds, to UNIX seconds."""
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def nonneg_number(raw: str | None, col: str) -> float:
    """Parse a finite non-negative number of column ``col``; ValueError says what is wrong."""
    raw = (raw or "").strip()
    if raw == "":
        raise ValueError(f"missing {col}")
    try:
        f = float(raw)
    except ValueError:
        raise ValueError(f"{col} is not a number: {raw!r}") from None
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{col} must be a finite non-negative number, got {raw!r}")
    return f


def iter_json_array(text: str) -> Iterator[tuple[int, Any]]:
    """Yield (line, element) for each element of a top-level JSON array."""
    dec = json.JSONDecoder()
    i = 0
    n = len(text)
    line = 1

    def skip_ws(j: int) -> int:
        while j < n and text[j] in " \t\r\n":
            j += 1
        return j

    i = skip_ws(i)
    if i >= n or text[i] != "[":
        raise TraceError("", 1, "expected a JSON array of job objects")
    i += 1
    pos = 0
    while True:
        i = skip_ws(i)
        if i < n and text[i] == "]":
            return
        line += text.count("\n", pos, i)
        pos = i
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            line_no = text.count("\n", 0, exc.pos) + 1
            raise TraceError("", line_no, f"invalid JSON: {exc.msg}") from None
        yield line, obj
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i += 1
        elif i < n and text[i] == "]":
            return
        else:
            raise TraceError("", text.count("\n", 0, i) + 1, "expected ',' or ']' after a job")


def collect_jobs(
    path: Path,
    records: Iterable[tuple[int, Any]],
    parse: Callable[[Any, int], TraceJob | None],
    on_error: OnError,
    out: TraceRead,
) -> None:
    """Parse ``(line, record)`` pairs into ``out``: a bad record raises or is collected as
    ``path:line: reason``; a syntax error of the document itself names ``path`` too."""
    try:
        for line, rec in records:
            try:
                job = parse(rec, line)
                if job is not None:
                    out.jobs.append(job)
            except (ValueError, TypeError) as exc:
                err = TraceError(str(path), line, str(exc))
                if on_error == "stop":
                    raise err from None
                out.errors.append(err)
    except TraceError as exc:
        if exc.path:
            raise
        raise TraceError(str(path), exc.line, exc.reason) from None


Check = Callable[[TraceJob], str | None] | None
"""Why a parsed job is refused (e.g. the wire contract's caps), checked row by row."""


def refused_or(job: TraceJob | None, check: Check) -> TraceJob | None:
    """``job``, or a ValueError (a bad row) with the reason ``check`` refuses it for."""
    if job is not None and check is not None:
        reason = check(job)
        if reason is not None:
            raise ValueError(reason)
    return job
