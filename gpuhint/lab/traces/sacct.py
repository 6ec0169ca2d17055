"""Slurm accounting as a trace: ``sacct --parsable2`` and ``sacct --json`` exports.

The operator's own history, replayable (``gpuhint replay``) and simulable
(``gpuhint evaluate qssf``). Export it with (all users, allocations only, one window)::

    sacct -a -X --parsable2 -S 2026-01-01 -E now --format=JobID,JobName,User,Account,\\
    Partition,Submit,Start,End,Elapsed,Timelimit,State,AllocTRES,ReqTRES,NNodes > history.sacct

    sacct -a -X --json -S 2026-01-01 -E now > history.sacct.json

(the ``--format`` list is one word: the continued line starts at column 0).

Columns may come in any order (the header names them; ``JobID``, ``Submit`` and
``State`` are required; the duration is ``Elapsed``, else ``End - Start``). Rows:

* job steps (``123.batch``, ``123.0``, ``123.extern``) are folded into their job: skipped;
* array tasks (``123_4``) are jobs of their own; a pending array (``123_[5-9]``) and
  jobs still pending or running have no history yet and are left out (counted in
  ``TraceRead.left_out``; the commands report them);
* GPUs come from ``AllocTRES`` (``gres/gpu=N`` or typed ``gres/gpu:a100=N``), else
  ``ReqTRES``; the VC is the account, else the partition (as the agent does);
* times are ISO (``2026-01-01T10:00:00``) in the local time zone, as sacct prints
  them (set ``TZ`` to the cluster's), or UNIX seconds (``SLURM_TIME_FORMAT=%s``).

A bad row raises :class:`~gpuhint.lab.traces.readers.TraceError` ``file:line: reason``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuhint.lab.traces.records import (
    Check,
    LeftOut,
    OnError,
    TraceError,
    TraceJob,
    TraceRead,
    collect_jobs,
    iter_json_array,
    open_text,
    refused_or,
)
from gpuhint.slurm.fields import gpus_from_tres, map_state, parse_timelimit, vc_name
from gpuhint.wire.contract import JobState

SACCT_FIELDS = (
    "JobID,JobName,User,Account,Partition,Submit,Start,End,Elapsed,Timelimit,State,"
    "AllocTRES,ReqTRES,NNodes"
)
_REQUIRED = ("jobid", "submit", "state")
_STEP = re.compile(r"^\d+(_\d+)?\.")
_PENDING_ARRAY = re.compile(r"_\[")
_NO_HISTORY = "pending or running (no history yet)"


def looks_like_sacct(header: str) -> bool:
    """True for a ``sacct --parsable2`` header line."""
    cols = {c.strip().lower() for c in header.split("|")}
    return "|" in header and set(_REQUIRED) <= cols


def _time(raw: str | None, col: str) -> float | None:
    s = (raw or "").strip()
    if not s or s in ("Unknown", "None", "N/A"):
        return None
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    try:
        return datetime.fromisoformat(s).timestamp()  # naive: local time, as sacct prints
    except ValueError:
        raise ValueError(f"{col}: {s!r} is not a time (ISO or UNIX seconds)") from None


def _row(row: dict[str, str], line: int) -> TraceJob | None:
    job_id = row["jobid"].strip()
    if not job_id:
        raise ValueError("empty JobID")
    if _STEP.match(job_id) or "." in job_id:
        return None
    mapped = map_state(row.get("state"))
    if mapped is None:
        raise ValueError(f"State: unknown Slurm state {row.get('state')!r}")
    status, final = mapped
    if status != "finished" or _PENDING_ARRAY.search(job_id):
        raise LeftOut(_NO_HISTORY)
    submit = _time(row.get("submit"), "Submit")
    if submit is None:
        raise ValueError("Submit: missing")
    start = _time(row.get("start"), "Start")
    end = _time(row.get("end"), "End")
    duration: float | None = None
    if row.get("elapsed", "").strip():
        try:
            duration = parse_timelimit(row["elapsed"]) or 0.0
        except ValueError:
            raise ValueError(f"Elapsed: {row['elapsed']!r} is not [D-]HH:MM:SS") from None
    elif start is not None and end is not None:
        if end < start:
            raise ValueError(f"End {row.get('end')!r} is before Start {row.get('start')!r}")
        duration = end - start
    if duration is None:
        raise ValueError("no Elapsed and no Start/End pair")
    gpus = gpus_from_tres(row.get("alloctres")) or gpus_from_tres(row.get("reqtres")) or 0
    try:
        limit = parse_timelimit(row.get("timelimit"))
    except ValueError:
        raise ValueError(f"Timelimit: {row.get('timelimit')!r} is not [D-]HH:MM:SS") from None
    nnodes = row.get("nnodes", "").strip()
    if nnodes and not nnodes.isdigit():
        raise ValueError(f"NNodes: {nnodes!r} is not a count")
    return TraceJob(
        job_id=job_id,
        submit_time=submit,
        duration=duration,
        num_gpus=gpus,
        vc=vc_name(row.get("account") or None, row.get("partition") or None),
        user=row.get("user") or None,
        name=row.get("jobname") or None,
        num_nodes=int(nnodes) if nnodes and int(nnodes) > 0 else None,
        state=final or JobState.UNKNOWN,
        start_time=start,
        line=line,
        time_limit_s=limit,
    )


def read_sacct_parsable(path: Path, on_error: OnError = "stop", check: Check = None) -> TraceRead:
    out = TraceRead(jobs=[], fmt="sacct")
    with open_text(path) as fh:
        header_line = fh.readline()
        if not header_line.strip():
            raise TraceError(str(path), 1, "empty file: no sacct header")
        header = [h.strip().lower() for h in header_line.rstrip("\r\n").split("|")]
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise TraceError(
                str(path),
                1,
                f"sacct header lacks {', '.join(missing)} (use --format={SACCT_FIELDS})",
            )
        for line, text in enumerate(fh, start=2):
            text = text.rstrip("\r\n")
            if not text.strip():
                continue
            try:
                fields = text.split("|")
                if len(fields) != len(header):
                    raise ValueError(
                        f"{len(fields)} fields where the header has {len(header)}"
                        " (a '|' inside a job name? export with --delimiter)"
                    )
                job = refused_or(_row(dict(zip(header, fields, strict=True)), line), check)
                if job is not None:
                    out.jobs.append(job)
            except LeftOut as why:
                out.leave_out(why)
            except ValueError as exc:
                err = TraceError(str(path), line, str(exc))
                if on_error == "stop":
                    raise err from None
                out.errors.append(err)
    return out


def _num(v: Any, field: str) -> float | None:
    """A number of sacct's JSON (plain, or ``{set, infinite, number}``); None when unset.
    A value that is not a number is a ValueError naming ``field``."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{field}: not a number: {str(v)[:40]!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{field}: not a finite number: {str(v)[:40]!r}")
    return x


def _gpus(items: Any) -> int | None:
    if not isinstance(items, list):
        return None
    total, typed = None, 0
    for it in items:
        if isinstance(it, dict) and it.get("type") == "gres":
            name = str(it.get("name") or "")
            count = int(_num(it.get("count"), "tres.count") or 0)
            if name == "gpu":
                total = count
            elif name.startswith("gpu:"):
                typed += count
    return total if total is not None else (typed or None)


def _json_job(j: Any, line: int) -> TraceJob | None:
    if not isinstance(j, dict):
        raise ValueError(f"expected a job object, got {type(j).__name__}")
    if j.get("job_id") is None:
        raise ValueError("missing job_id")
    st = j.get("state")
    raw = st.get("current") if isinstance(st, dict) else st
    mapped = map_state(raw)
    if mapped is None:
        raise ValueError(f"state: unknown Slurm state {raw!r}")
    status, final = mapped
    arr: dict[str, Any] = j["array"] if isinstance(j.get("array"), dict) else {}
    array_id = int(_num(arr.get("job_id"), "array.job_id") or 0)
    task = _num(arr.get("task_id"), "array.task_id")
    if status != "finished" or (array_id and task is None and arr.get("task")):
        raise LeftOut(_NO_HISTORY)
    job_id = f"{array_id}_{int(task)}" if array_id and task is not None else str(j["job_id"])
    t = _obj(j, "time")
    submit = _num(t.get("submission"), "time.submission")
    if not submit:
        raise ValueError("time.submission: missing")
    start, end = _num(t.get("start"), "time.start"), _num(t.get("end"), "time.end")
    elapsed = _num(t.get("elapsed"), "time.elapsed")
    if elapsed is None and start and end:
        if end < start:
            raise ValueError(f"time.end {end:.0f} is before time.start {start:.0f}")
        elapsed = end - start
    if elapsed is None or elapsed < 0:
        raise ValueError("no time.elapsed and no time.start/end pair")
    tres = _obj(j, "tres")
    gpus = _gpus(tres.get("allocated")) or _gpus(tres.get("requested")) or 0
    assoc = _obj(j, "association")
    nodes = _num(j.get("allocation_nodes"), "allocation_nodes")
    limit = t.get("limit")
    limit_min = (
        None if isinstance(limit, dict) and limit.get("infinite") else _num(limit, "time.limit")
    )
    return TraceJob(
        job_id=job_id,
        submit_time=submit,
        duration=elapsed,
        num_gpus=gpus,
        vc=vc_name(_str(j, "account") or _str(assoc, "account"), _str(j, "partition")),
        user=_str(j, "user") or _str(assoc, "user"),
        name=_str(j, "name"),
        num_nodes=int(nodes) if nodes else None,
        state=final or JobState.UNKNOWN,
        start_time=start or None,
        line=line,
        time_limit_s=limit_min * 60.0 if limit_min else None,
    )


def _obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]``: an object, ``{}`` when absent or null; another type is a bad row."""
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{key}: expected an object, got {type(v).__name__}")
    return v


def _str(d: dict[str, Any], key: str) -> str | None:
    """``d[key]``: a string, None when absent, null or empty; another type is a bad row."""
    v = d.get(key)
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ValueError(f"{key}: expected a string, got {type(v).__name__}")
    return v


def _jobs_array(text: str) -> Iterator[tuple[int, Any]]:
    """(line, element) of the top-level ``"jobs"`` array of an sacct JSON document."""
    m = re.search(r'"jobs"\s*:\s*\[', text)
    if not m:
        raise TraceError("", 1, 'sacct JSON has no "jobs" array')
    start = m.end() - 1
    base = text.count("\n", 0, start)
    for line, obj in iter_json_array(text[start:], rest_ok=True):
        yield base + line, obj


def read_sacct_json(path: Path, on_error: OnError = "stop", check: Check = None) -> TraceRead:
    with open_text(path) as fh:
        text = fh.read()
    out = TraceRead(jobs=[], fmt="sacct-json")

    def parse(rec: Any, line: int) -> TraceJob | None:
        return refused_or(_json_job(rec, line), check)

    collect_jobs(path, _jobs_array(text), parse, on_error, out)
    if not out.jobs and not out.errors:
        try:
            doc = json.loads(text)
            errs = doc.get("errors") if isinstance(doc, dict) else None
        except (json.JSONDecodeError, RecursionError):
            errs = None
        if errs:
            raise TraceError(str(path), 1, f"sacct reported errors: {errs}")
    return out
