"""What every trace reader shares: the job record, ``file:line`` errors, text and time parsing.

The format readers (:mod:`.readers`, :mod:`.sacct`, :mod:`.loadseries`) build on it.
"""

from __future__ import annotations

import csv
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


class LeftOut(Exception):
    """A valid record that is no job of the trace: counted by its reason, not an error."""


@dataclass
class TraceRead:
    jobs: list[TraceJob]
    errors: list[TraceError] = field(default_factory=list)
    fmt: str = ""
    left_out: dict[str, int] = field(default_factory=dict)
    """Valid records that are no jobs of the trace (jobs still running), by reason."""

    def leave_out(self, why: LeftOut) -> None:
        self.left_out[str(why)] = self.left_out.get(str(why), 0) + 1


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


def csv_rows(
    reader: Any, path: str, error: type[TraceError] = TraceError, offset: int = 0
) -> Iterator[Any]:
    """The rows of a ``csv`` reader. A row the csv module cannot split (a field past its
    128 KiB limit: a stray quote swallowing the lines after it) is ``error`` naming the
    line it starts on (``offset`` + the reader's line)."""
    rows = iter(reader)
    while True:
        before = reader.line_num
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            raise error(
                path, offset + before + 1, f"{exc} (a stray quote swallows the lines after it?)"
            ) from None
        yield row


def whole_row(row: dict[Any, Any], width: int) -> dict[Any, Any]:
    """A ``csv.DictReader`` row with no more fields than the header's ``width`` (the
    extra ones land under ``None``); else :class:`ValueError` saying how many.

    >>> whole_row({"a": "1", None: ["2", "3"]}, 1)
    Traceback (most recent call last):
    ValueError: 3 fields where the header has 1
    """
    if None in row:
        raise ValueError(f"{width + len(row[None])} fields where the header has {width}")
    return row


def iter_json_array(text: str, rest_ok: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (line, element) for each element of a top-level JSON array; text after the
    array is an error unless ``rest_ok`` (the array inside a larger document)."""
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
            break
        line += text.count("\n", pos, i)
        pos = i
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            line_no = text.count("\n", 0, exc.pos) + 1
            raise TraceError("", line_no, f"invalid JSON: {exc.msg}") from None
        except RecursionError:  # [[[[... past the decoder's recursion limit
            raise TraceError("", line, "invalid JSON: nested too deeply") from None
        yield line, obj
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i += 1
        elif i < n and text[i] == "]":
            break
        else:
            raise TraceError("", text.count("\n", 0, i) + 1, "expected ',' or ']' after a job")
    i = skip_ws(i + 1)
    if i < n and not rest_ok:  # e.g. two exports concatenated: the second array not read
        raise TraceError(
            "",
            text.count("\n", 0, i) + 1,
            "unexpected text after the JSON array: a trace holds one array of jobs",
        )


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
            except LeftOut as why:
                out.leave_out(why)
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


def first_of_each_id(check: Check) -> Check:
    """``check``, then: a job whose id an earlier record of the trace has is refused (the
    service takes a repeated id for a producer's resend of that job and drops it)."""
    seen: dict[str, int] = {}

    def checked(job: TraceJob) -> str | None:
        why = check(job) if check is not None else None
        if why is None:
            if job.job_id in seen:
                return (
                    f"job id {job.job_id!r} already at line {seen[job.job_id]}: the service "
                    "would take this job for a resend of that one and drop it"
                )
            seen[job.job_id] = job.line
        return why

    return checked


def refused_or(job: TraceJob | None, check: Check) -> TraceJob | None:
    """``job``, or a ValueError (a bad row) with the reason ``check`` refuses it for."""
    if job is not None and check is not None:
        reason = check(job)
        if reason is not None:
            raise ValueError(reason)
    return job
