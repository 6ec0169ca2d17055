"""Stream a job trace into a compact pandas frame, chunk by chunk.

Every format goes through gpuhint's own trace readers (:mod:`gpuhint.lab.traces.readers`): the
format is detected by :func:`gpuhint.lab.traces.readers.detect_format`; formats whose reader parses
CSV rows one at a time (Helios, plain) are streamed row by row through that row parser,
and any other format (Philly JSON, and whatever the reader registry gains later) is read
by :func:`gpuhint.lab.traces.readers.read_trace` and then chunked. Each chunk of ``chunk_rows`` jobs
becomes a small frame with numeric columns and categorical strings, so a million-job
trace takes tens of megabytes, not the gigabytes of a million Python job objects.

Columns of :attr:`TraceFrame.jobs` (one row per job, in submit order):

==========  =========  ======================================================
submit      float64    submit time, UNIX seconds (or seconds since the trace start)
duration    float64    run time, seconds
gpus        int32      GPUs asked for (0: a CPU job)
start       float64    start time, NaN when the trace has none
state       category   final state (``gpuhint.wire.contract.JobState`` names)
vc          category   virtual cluster ("default" when the trace has none)
user        category   user, NaN when the trace has none
name        category   job name, NaN when the trace has none
limit       float64    requested time limit, seconds (NaN: none)
line        int64      the job's line in the file
==========  =========  ======================================================
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from gpuhint.lab.traces import readers as traces
from gpuhint.lab.traces.readers import OnError, TraceError, TraceJob
from gpuhint.lab.traces.records import csv_rows, whole_row

CHUNK_ROWS = 100_000
PARALLEL_MIN_BYTES = 16 << 20

RowParser = Callable[[dict[str, str], int], TraceJob]


# Readers of gpuhint.lab.traces.readers that parse one CSV row at a time: streamed row by row.
# Every other format is read whole by gpuhint.lab.traces.readers.read_trace, then chunked.
_ROW_PARSERS: dict[str, RowParser] = {
    "helios": traces.checked_row(traces._helios_row),
    "plain": traces.checked_row(traces._plain_row),
}

Progress = Callable[[int, int], None]
"""Called as ``progress(bytes_read, bytes_total)`` while the file is read."""


@dataclass
class TraceFrame:
    """A whole trace as columns, plus what reading it found."""

    path: str
    fmt: str
    jobs: pd.DataFrame
    errors: list[TraceError] = field(default_factory=list)
    tail: list[TraceJob] = field(default_factory=list)
    """The last ``tail_jobs`` jobs of the trace (by submit time) as TraceJob records."""
    seconds: float = 0.0
    left_out: dict[str, int] = field(default_factory=dict)
    """Valid records that are no jobs (an sacct export's running jobs), by reason."""

    @property
    def rows(self) -> int:
        return len(self.jobs)


_CATEGORIES = ("state", "vc", "user", "name")


def _chunk_frame(jobs: list[TraceJob]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "submit": pd.array([j.submit_time for j in jobs], dtype="float64"),
            "duration": pd.array([j.duration for j in jobs], dtype="float64"),
            "gpus": pd.array([j.num_gpus for j in jobs], dtype="int32"),
            "start": pd.array(
                [float("nan") if j.start_time is None else j.start_time for j in jobs],
                dtype="float64",
            ),
            "state": pd.Categorical([j.state.value for j in jobs]),
            "vc": pd.Categorical([j.vc for j in jobs]),
            "user": pd.Categorical([j.user for j in jobs]),
            "name": pd.Categorical([j.name for j in jobs]),
            "limit": pd.array(
                [math.nan if _limit(j) is None else _limit(j) for j in jobs], dtype="float64"
            ),
            "line": pd.array([j.line for j in jobs], dtype="int64"),
            # the job id as a 64-bit hash: duplicates found without a million strings
            "id_hash": pd.util.hash_array(np.array([j.job_id for j in jobs], dtype=object)),
        }
    )


def _limit(job: TraceJob) -> float | None:
    """The job's requested time limit, for readers that record one."""
    return getattr(job, "time_limit_s", None)


def _concat(chunks: list[pd.DataFrame]) -> pd.DataFrame:
    if not chunks:
        return _chunk_frame([])
    cols: dict[str, Any] = {}
    for col in chunks[0].columns:
        parts = [c[col] for c in chunks]
        if col in _CATEGORIES:
            cols[col] = pd.api.types.union_categoricals([p.array for p in parts], ignore_order=True)
        else:
            cols[col] = pd.concat(parts, ignore_index=True)
    df = pd.DataFrame(cols)
    # A stable sort keeps file order among equal submit times, as read_trace does.
    order = df.sort_values(["submit", "line"], kind="stable").index
    if not order.equals(df.index):
        df = df.loc[order].reset_index(drop=True)
    return df


class _Counting(io.RawIOBase):
    """A binary file that counts the bytes read through it (for the progress bar)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.fh.readinto(b)  # type: ignore[attr-defined]
        self.count += n or 0
        return n or 0


def _iter_csv(
    path: Path,
    kind: str,
    parse: RowParser,
    on_error: OnError,
    errors: list[TraceError],
    counter: _Counting,
) -> Iterator[TraceJob]:
    with open(path, "rb") as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    buffered = io.BufferedReader(counter, buffer_size=1 << 20)
    binary: Any = gzip.GzipFile(fileobj=buffered) if gzipped else buffered
    with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        reader.fieldnames = traces.csv_header(reader.fieldnames, str(path), kind)
        width = len(reader.fieldnames)
        for row in csv_rows(reader, str(path)):
            line = reader.line_num
            try:
                yield parse(whole_row(row, width), line)
            except ValueError as exc:
                err = TraceError(str(path), line, str(exc))
                if on_error == "stop":
                    raise err from None
                errors.append(err)


def read_frame(
    path: str | Path,
    fmt: str = "auto",
    on_error: OnError = "stop",
    *,
    chunk_rows: int = CHUNK_ROWS,
    tail_jobs: int = 0,
    progress: Progress | None = None,
    workers: int | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> TraceFrame:
    """Read a trace of any format gpuhint reads into a :class:`TraceFrame`.

    A large uncompressed CSV without quoted fields (``parallel_min_bytes`` and up) is
    parsed by ``workers`` processes (default: one per CPU, at most 4), each over a range
    of whole lines; the result is the same as reading it in one process.

    Raises what :func:`gpuhint.lab.traces.readers.read_trace` raises: :class:`TraceError` naming
    ``file:line`` (unless ``on_error="skip"``), FileNotFoundError, IsADirectoryError.
    """
    t0 = time.perf_counter()
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    kind = traces.detect_format(p) if fmt == "auto" else fmt
    total = p.stat().st_size
    errors: list[TraceError] = []
    left_out: dict[str, int] = {}
    parse = _ROW_PARSERS.get(kind)
    n_workers = workers if workers is not None else min(os.cpu_count() or 1, 4)
    parts = (
        _split_lines(p, n_workers * 4)
        if parse is not None and n_workers > 1 and total >= parallel_min_bytes
        else None
    )
    raw = open(p, "rb")  # noqa: SIM115 - closed below, after the generator is drained
    counter = _Counting(raw)
    try:
        if parts is not None:
            chunks, tail, errors = _read_parallel(
                p, kind, on_error, parts, n_workers, chunk_rows, tail_jobs, progress, total
            )
        elif parse is not None:
            source: Iterator[TraceJob] = _iter_csv(p, kind, parse, on_error, errors, counter)
        else:
            read = traces.read_trace(p, kind, on_error)  # type: ignore[arg-type]
            errors.extend(read.errors)
            left_out = read.left_out
            counter.count = total
            source = iter(read.jobs)
        if parts is None:
            chunks, tail = _frames(source, chunk_rows, tail_jobs, progress, counter, total)
    finally:
        raw.close()
    if progress is not None:
        progress(total, total)
    df = _concat(chunks)
    tail_sorted = sorted(tail, key=lambda j: (j.submit_time, j.line))
    if tail_jobs and len(df) > len(tail_sorted):
        # The file need not be in submit order: keep the jobs latest by submit time.
        latest = set(df["line"].iloc[-tail_jobs:].tolist())
        if {j.line for j in tail_sorted} != latest:
            tail_sorted = _latest_jobs(p, kind, on_error, latest)
    return TraceFrame(
        path=str(path),
        fmt=kind,
        jobs=df,
        errors=errors,
        tail=tail_sorted,
        seconds=time.perf_counter() - t0,
        left_out=left_out,
    )


def _frames(
    source: Iterator[TraceJob],
    chunk_rows: int,
    tail_jobs: int,
    progress: Progress | None,
    counter: _Counting | None,
    total: int,
) -> tuple[list[pd.DataFrame], deque[TraceJob]]:
    """Chunk ``source`` into frames; keep its last ``tail_jobs`` jobs."""
    chunks: list[pd.DataFrame] = []
    tail: deque[TraceJob] = deque(maxlen=max(tail_jobs, 0))
    buf: list[TraceJob] = []
    for job in source:
        buf.append(job)
        if len(buf) >= chunk_rows:
            chunks.append(_chunk_frame(buf))
            if tail_jobs:
                tail.extend(buf)
            buf = []
            if progress is not None and counter is not None:
                progress(counter.count, total)
    if buf:
        chunks.append(_chunk_frame(buf))
        if tail_jobs:
            tail.extend(buf)
    return chunks, tail


Part = tuple[int, int, int]
"""A range of whole lines of a file: (first byte, end byte, line number of its first line)."""


def _split_lines(path: Path, n: int) -> list[Part] | None:
    """Cut a CSV after its header into ``n`` ranges of whole lines; None when it cannot be
    cut safely (gzipped, or a quote anywhere: a quoted field may hold a newline)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b" or b'"' in data:
        return None
    head = data.find(b"\n") + 1
    if head <= 0:
        return None
    cuts = [head]
    for k in range(1, n):
        nl = data.find(b"\n", max(cuts[-1], head + (len(data) - head) * k // n))
        if nl < 0:
            break
        if nl + 1 > cuts[-1]:
            cuts.append(nl + 1)
    cuts.append(len(data))
    parts: list[Part] = []
    line = 2
    for a, b in itertools.pairwise(cuts):
        if b > a:
            parts.append((a, b, line))
        line += data.count(b"\n", a, b)
    return parts


def _parse_part(
    path: str, kind: str, on_error: OnError, part: Part, chunk_rows: int, tail_jobs: int
) -> tuple[list[pd.DataFrame], list[TraceJob], list[tuple[int, str]], tuple[int, str] | None]:
    """In a worker: the jobs of one range of lines, as frames; bad rows as (line, reason)."""
    parse = _ROW_PARSERS[kind]
    with open(path, "rb") as fh:
        header = fh.readline().decode("utf-8-sig")
        fh.seek(part[0])
        text = fh.read(part[1] - part[0]).decode("utf-8")
    fields = traces.csv_header(next(csv.reader([header])), path, kind)
    width = len(fields)
    reader = csv.DictReader(io.StringIO(text, newline=""), fieldnames=fields)
    bad: list[tuple[int, str]] = []
    stop: tuple[int, str] | None = None

    def jobs() -> Iterator[TraceJob]:
        nonlocal stop
        try:
            for row in csv_rows(reader, path, offset=part[2] - 1):
                line = part[2] - 1 + reader.line_num
                try:
                    yield parse(whole_row(row, width), line)
                except ValueError as exc:
                    if on_error == "stop":
                        stop = (line, str(exc))
                        return
                    bad.append((line, str(exc)))
        except TraceError as exc:  # a row the csv module cannot split: stops the read
            stop = (exc.line, exc.reason)

    chunks, tail = _frames(jobs(), chunk_rows, tail_jobs, None, None, 0)
    return chunks, list(tail), bad, stop


def _read_parallel(
    path: Path,
    kind: str,
    on_error: OnError,
    parts: list[Part],
    workers: int,
    chunk_rows: int,
    tail_jobs: int,
    progress: Progress | None,
    total: int,
) -> tuple[list[pd.DataFrame], deque[TraceJob], list[TraceError]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    chunks: list[pd.DataFrame] = []
    tail: deque[TraceJob] = deque(maxlen=max(tail_jobs, 0))
    errors: list[TraceError] = []
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [
            pool.submit(_parse_part, str(path), kind, on_error, part, chunk_rows, tail_jobs)
            for part in parts
        ]
        for part, fut in zip(parts, futures, strict=True):
            got, part_tail, bad, stop = fut.result()
            errors.extend(TraceError(str(path), line, why) for line, why in bad)
            if stop is not None:
                for f in futures:
                    f.cancel()
                raise TraceError(str(path), stop[0], stop[1])
            chunks.extend(got)
            tail.extend(part_tail)
            if progress is not None:
                progress(part[1], total)
    return chunks, tail, errors


def _latest_jobs(path: Path, kind: str, on_error: OnError, keep: set[int]) -> list[TraceJob]:
    """Second pass for a trace not in submit order: the jobs of the lines in ``keep``."""
    parse = _ROW_PARSERS.get(kind)
    if parse is not None:
        with open(path, "rb") as raw:
            jobs = [
                j
                for j in _iter_csv(path, kind, parse, on_error, [], _Counting(raw))
                if j.line in keep
            ]
    else:
        jobs = [j for j in traces.read_trace(path, kind, on_error).jobs if j.line in keep]  # type: ignore[arg-type]
    return sorted(jobs, key=lambda j: (j.submit_time, j.line))
