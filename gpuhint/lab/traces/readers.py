"""Readers for historical job traces, and their conversion into JobEvents.

Formats (``fmt="auto"`` picks one from the file name and header):

* ``helios`` -- SenseTime Helios ``cluster_log.csv``:
  ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue``
* ``philly`` -- Microsoft Philly ``cluster_job_log`` JSON (a list of job objects).
* ``plain``  -- ``job_id,submission_time,duration,num_gpu`` (seconds), as the ITP traces.
* ``sacct`` / ``sacct-json`` -- Slurm accounting: ``sacct --parsable2`` / ``sacct --json``
  (:mod:`gpuhint.lab.traces.sacct`).

Helios-style and plain CSVs may carry an optional ``time_limit`` column: the run time
the job asked for, in seconds (Slurm ``TimeLimit``); empty means none.

Files may be gzipped. A bad record raises :class:`TraceError` naming ``file:line`` and
the reason, or, with ``on_error="skip"``, is collected in ``TraceRead.errors``.
Times without a zone are read as UTC.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from gpuhint.lab.traces.records import (
    Check,
    OnError,
    TraceError,
    TraceJob,
    TraceRead,
    collect_jobs,
    csv_rows,
    first_of_each_id,
    iter_json_array,
    nonneg_number,
    open_text,
    parse_time,
    refused_or,
    whole_row,
)
from gpuhint.lab.traces.sacct import looks_like_sacct, read_sacct_json, read_sacct_parsable
from gpuhint.wire.contract import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_GPUS,
    MAX_LIST,
    MAX_TIME,
    JobEvent,
    JobPhase,
    JobState,
)

TraceFormat = Literal["auto", "helios", "philly", "plain", "sacct", "sacct-json"]


def detect_format(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    with open_text(path) as fh:
        head = fh.read(4096)
    if head.lstrip().startswith("{"):  # sacct --json is an object; Philly is an array
        return "sacct-json"
    if name.endswith(".json"):
        return "philly"
    header = head.splitlines()[0].strip().lower() if head else ""
    if "|" in header and looks_like_sacct(header):
        return "sacct"
    cols = {c.strip() for c in header.split(",")}
    if {"submit_time", "gpu_num", "duration"} <= cols:
        return "helios"
    if {"submission_time", "duration", "num_gpu"} <= cols:
        return "plain"
    raise TraceError(
        str(path),
        1,
        "unknown trace format: expected a Helios cluster_log.csv header "
        "(job_id,...,gpu_num,...,submit_time,...,duration), a plain "
        "job_id,submission_time,duration,num_gpu header, Philly JSON, or a Slurm "
        "sacct --parsable2 / --json export",
    )


def _int(row: dict[str, str], col: str, required: bool = True) -> int | None:
    raw = (row.get(col) or "").strip()
    if raw == "":
        if required:
            raise ValueError(f"missing {col}")
        return None
    try:
        f = float(raw)
    except ValueError:
        raise ValueError(f"{col} is not a number: {raw!r}") from None
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise ValueError(f"{col} must be a non-negative integer, got {raw!r}")
    return int(f)


def _float(row: dict[str, str], col: str) -> float:
    return nonneg_number(row.get(col), col)


def _time(row: dict[str, str], col: str, required: bool = True) -> float | None:
    raw = (row.get(col) or "").strip()
    if raw == "":
        if required:
            raise ValueError(f"missing {col}")
        return None
    try:
        return parse_time(raw)
    except ValueError:
        raise ValueError(f"{col} is not a time (YYYY-MM-DD HH:MM:SS): {raw!r}") from None


_HELIOS_STATES = {s.value for s in JobState}


def _time_limit(row: dict[str, str]) -> float | None:
    """The optional ``time_limit`` column (seconds the job asked for; empty: none)."""
    raw = (row.get("time_limit") or "").strip()
    if not raw:
        return None
    limit = nonneg_number(raw, "time_limit")
    if limit == 0:
        raise ValueError("time_limit must be > 0 seconds (leave it empty for no limit)")
    return limit


def _helios_row(row: dict[str, str], line: int) -> TraceJob:
    job_id = (row.get("job_id") or "").strip()
    if not job_id:
        raise ValueError("missing job_id")
    submit = _time(row, "submit_time")
    assert submit is not None
    state_raw = (row.get("state") or "COMPLETED").strip().upper() or "COMPLETED"
    state = JobState(state_raw) if state_raw in _HELIOS_STATES else JobState.UNKNOWN
    start = _time(row, "start_time", required=False)
    queue_raw = (row.get("queue") or "").strip()
    if start is None and queue_raw:
        start = submit + _float(row, "queue")
    return TraceJob(
        job_id=job_id,
        submit_time=submit,
        duration=_float(row, "duration"),
        num_gpus=_int(row, "gpu_num") or 0,
        vc=(row.get("vc") or "").strip() or "default",
        user=(row.get("user") or "").strip() or None,
        name=(row.get("job_name") or row.get("name") or "").strip() or None,
        num_cpus=_int(row, "cpu_num", required=False),
        num_nodes=_int(row, "node_num", required=False),
        state=state,
        start_time=start,
        line=line,
        time_limit_s=_time_limit(row),
    )


def _plain_row(row: dict[str, str], line: int) -> TraceJob:
    job_id = (row.get("job_id") or "").strip()
    if not job_id:
        raise ValueError("missing job_id")
    return TraceJob(
        job_id=job_id,
        submit_time=_float(row, "submission_time"),
        duration=_float(row, "duration"),
        num_gpus=_int(row, "num_gpu") or 0,
        line=line,
        time_limit_s=_time_limit(row),
    )


CSV_COLUMNS = {
    "helios": ("job_id", "gpu_num", "submit_time", "duration"),
    "plain": ("job_id", "submission_time", "duration", "num_gpu"),
}
"""The columns a CSV format's rows need."""


def csv_header(names: Sequence[str] | None, path: str, kind: str) -> list[str]:
    """A CSV format's header, its names stripped and lower case (as :func:`detect_format`
    reads them); a header without the format's columns is a line-1 :class:`TraceError`."""
    if names is None:
        raise TraceError(path, 1, "empty file: no header")
    fields = [n.strip().lower() for n in names]
    missing = [c for c in CSV_COLUMNS[kind] if c not in fields]
    if missing:
        raise TraceError(path, 1, f"header lacks {', '.join(missing)} for the {kind} format")
    return fields


def _read_csv(
    path: Path, parse: Callable[[dict[str, str], int], TraceJob], on_error: OnError, kind: str
) -> TraceRead:
    out = TraceRead(jobs=[])
    with open_text(path) as fh:
        reader = csv.DictReader(fh)
        reader.fieldnames = csv_header(reader.fieldnames, str(path), kind)
        for row in csv_rows(reader, str(path)):
            line = reader.line_num
            try:
                out.jobs.append(parse(whole_row(row, len(reader.fieldnames)), line))
            except ValueError as exc:
                err = TraceError(str(path), line, str(exc))
                if on_error == "stop":
                    raise err from None
                out.errors.append(err)
    return out


_PHILLY_STATES = {
    "Pass": JobState.COMPLETED,
    "Failed": JobState.FAILED,
    "Killed": JobState.CANCELLED,
}


def _philly_record(rec: Any) -> TraceJob:
    if not isinstance(rec, dict):
        raise ValueError(f"expected a job object, got {type(rec).__name__}")
    raw_id = rec.get("jobid")
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise ValueError(f"jobid must be a string or a number, got {type(raw_id).__name__}")
    job_id = str(raw_id or "").strip()
    if not job_id:
        raise ValueError("missing jobid")
    submitted = rec.get("submitted_time")
    if not submitted:
        raise ValueError("missing submitted_time")
    try:
        submit = parse_time(str(submitted))
        start = parse_time(str(rec["start_time"])) if rec.get("start_time") else None
        end = parse_time(str(rec["end_time"])) if rec.get("end_time") else None
    except ValueError as exc:
        raise ValueError(f"bad time: {exc}") from None
    runtime = rec.get("runtime_min")
    if (
        isinstance(runtime, int | float)
        and not isinstance(runtime, bool)  # true is no number of minutes
        and math.isfinite(runtime)
        and runtime >= 0
    ):
        duration = float(runtime) * 60.0
    elif start is not None and end is not None and end >= start:
        duration = end - start
    else:
        raise ValueError("no usable runtime_min and no start_time/end_time pair")
    detail = rec.get("detail") or []
    if not isinstance(detail, list):
        raise ValueError("detail must be a list of {ip, gpus}")
    gpus = 0
    for k, d in enumerate(detail):
        ids = (d.get("gpus") or []) if isinstance(d, dict) else []
        if not isinstance(ids, list):
            raise ValueError(f"detail[{k}].gpus must be a list of GPU ids")
        gpus += len(ids)
    status = str(rec.get("status") or "")
    return TraceJob(
        job_id=job_id,
        submit_time=submit,
        duration=duration,
        num_gpus=gpus,
        vc=str(rec.get("vc") or "default"),
        user=str(rec["user"]) if rec.get("user") else None,
        num_nodes=len(detail) or None,
        state=_PHILLY_STATES.get(status, JobState.UNKNOWN),
        start_time=start,
    )


def _read_philly(path: Path, on_error: OnError, check: Check) -> TraceRead:
    with open_text(path) as fh:
        text = fh.read()
    out = TraceRead(jobs=[])
    collect_jobs(
        path,
        iter_json_array(text),
        lambda rec, line: refused_or(dataclasses.replace(_philly_record(rec), line=line), check),
        on_error,
        out,
    )
    return out


def read_trace(
    path: str | Path,
    fmt: TraceFormat = "auto",
    on_error: OnError = "stop",
    unique_ids: bool = False,
) -> TraceRead:
    """Read a trace file into :class:`TraceJob` records, sorted by submit time.

    Raises :class:`TraceError` (``file:line: reason``) on the first bad record unless
    ``on_error="skip"``; raises :class:`FileNotFoundError` if the file is missing. With
    ``unique_ids`` a job whose id an earlier one has is a bad record (for replay and the
    simulations: the service drops it as a resend).
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    kind = detect_format(p) if fmt == "auto" else fmt
    # rows the wire contract refuses (70,000 GPUs, a run of two years, a VC name with a
    # space) are bad rows too, checked as they are read: the first bad row in file order
    # stops the read, whichever kind of bad it is
    check = first_of_each_id(contract_error) if unique_ids else contract_error
    if kind == "helios":
        out = _read_csv(p, checked_row(_helios_row, check), on_error, kind)
    elif kind == "plain":
        out = _read_csv(p, checked_row(_plain_row, check), on_error, kind)
    elif kind == "philly":
        out = _read_philly(p, on_error, check)
    elif kind in ("sacct", "sacct-json"):
        read = read_sacct_parsable if kind == "sacct" else read_sacct_json
        out = read(p, on_error, check)
    else:  # pragma: no cover - guarded by the Literal
        raise ValueError(f"unknown format {fmt!r}")
    out.fmt = kind
    out.jobs.sort(key=lambda j: (j.submit_time, j.line))
    return out


def checked_row(
    parse: Callable[[dict[str, str], int], TraceJob], check: Check = None
) -> Callable[[dict[str, str], int], TraceJob]:
    """``parse``, refusing a row whose job ``check`` (default: the wire contract,
    :func:`contract_error`) refuses: a ValueError with its reason, as any bad row."""

    def checked(row: dict[str, str], line: int) -> TraceJob:
        job = refused_or(parse(row, line), check or contract_error)
        assert job is not None  # a row parser returns a job or raises
        return job

    return checked


def contract_error(job: TraceJob) -> str | None:
    """Why the wire contract refuses ``job``'s events (its finished event carries every
    field), or None.

    >>> contract_error(TraceJob("1", 0.0, 60.0, 70_000))
    'num_gpus 70000: Input should be less than or equal to 65536'
    """
    if _within_caps(job):
        return None  # the common case, without building an event (~10 us a row)
    common = _common(job, "default")
    for (phase, t, extra), when in zip(_phases(job), _WHEN, strict=True):
        try:
            JobEvent(phase=phase, time=t, **common, **extra)
        except ValidationError as exc:
            e = exc.errors()[0]
            field = ".".join(str(x) for x in e["loc"])
            field = when if field == "time" else field
            got = repr(e["input"])
            got = got if len(got) <= 60 else got[:56] + "...'"
            return f"{field} {got}: {e['msg']}" if field else str(e["msg"])
    return None


_WHEN = ("submit_time", "start_time", "end time (start + duration)")
"""What an event's ``time`` is, per phase of :func:`_phases` (error messages)."""


_PHASE_RANK = {JobPhase.SUBMITTED: 0, JobPhase.STARTED: 1, JobPhase.FINISHED: 2}


def job_events(jobs: Iterable[TraceJob], cluster: str = "default") -> list[JobEvent]:
    """Turn trace jobs into submitted/started/finished events in time order.

    A job whose start time the trace lacks is taken to start at submit (no queueing
    recorded); it finishes ``duration`` seconds after it starts.
    """
    events: list[tuple[float, int, int, JobEvent]] = []
    for seq, j in enumerate(jobs):
        common = _common(j, cluster)
        for phase, t, extra in _phases(j):
            ev = JobEvent(phase=phase, time=t, **common, **extra)
            events.append((t, _PHASE_RANK[phase], seq, ev))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    return [e[3] for e in events]


def _within_caps(j: TraceJob) -> bool:
    """Whether ``j`` is clearly inside the contract's caps (:class:`JobEvent`'s fields);
    False sends it to the contract itself for the verdict and the reason."""
    start = j.start_time if j.start_time is not None else j.submit_time
    end = max(start, j.submit_time) + j.duration
    return (
        _plain_text(j.job_id, j.vc, j.user, j.name)
        and all(type(n) is int for n in (j.num_gpus, j.num_cpus or 0, j.num_nodes or 0))
        and isinstance(j.state, JobState)
        and 0 < len(j.job_id) <= 256
        and 0 < len(j.vc) <= 128
        and not any(c == ":" or c.isspace() for c in j.vc)
        and len(j.user or "") <= 256
        and len(j.name or "") <= 256
        and 0 <= j.num_gpus <= MAX_GPUS
        and 0 <= (j.num_cpus or 0) <= MAX_COUNT
        and 0 <= (j.num_nodes or 0) <= MAX_LIST
        and j.submit_time >= 0
        and start >= 0
        and end <= MAX_TIME
        and 0 <= j.duration <= MAX_DURATION_S
        and (j.time_limit_s is None or 0 <= j.time_limit_s <= MAX_DURATION_S)
    )


def _plain_text(*values: object) -> bool:
    """Whether every value is None or a ``str`` the contract can take as text: not a
    number or a list from a JSON trace, no lone surrogates (an escape like ``\\udc80``)."""
    for v in values:
        if v is None:
            continue
        if type(v) is not str or (not v.isascii() and _SURROGATE.search(v)):
            return False
    return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def _common(j: TraceJob, cluster: str) -> dict[str, Any]:
    """The fields every event of a job carries."""
    return {
        "job_id": j.job_id,
        "cluster": cluster,
        "vc": j.vc,
        "user": j.user,
        "name": j.name,
        "num_gpus": j.num_gpus,
        "num_cpus": j.num_cpus,
        "num_nodes": j.num_nodes,
        "time_limit_s": j.time_limit_s,
        "submit_time": j.submit_time,
    }


def _phases(j: TraceJob) -> list[tuple[JobPhase, float, dict[str, Any]]]:
    """(phase, time, the phase's own fields) of a job's submit, start and finish; a job
    whose start the trace lacks starts at its submit."""
    start = j.start_time if j.start_time is not None else j.submit_time
    start = max(start, j.submit_time)
    return [
        (JobPhase.SUBMITTED, j.submit_time, {}),
        (JobPhase.STARTED, start, {"start_time": start}),
        (
            JobPhase.FINISHED,
            start + j.duration,
            {"start_time": start, "duration_s": j.duration, "state": j.state},
        ),
    ]
