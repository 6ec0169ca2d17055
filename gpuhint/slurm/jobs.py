"""Slurm -> JobEvents: ``squeue --json``, ``sacct --json`` or ``sacct --parsable2``.

Reads one snapshot of Slurm's view per poll and lets :class:`~gpuhint.cores.job_tracker.JobTracker`
publish only what changed. The JSON shapes are Slurm's ``data_parser`` output
(``squeue --json`` / ``sacct --json``, Slurm 23.02 to 24.11; older plain-number and
plain-string variants are accepted too)::

    squeue: {"jobs": [{"job_id": 42, "job_state": ["RUNNING"], "partition": "gpu",
              "user_name": "alice", "name": "train", "nodes": "gpu[01-02]",
              "submit_time": {"set": true, "number": 1717000000}, "start_time": ...,
              "end_time": ..., "tres_alloc_str": "cpu=16,node=2,gres/gpu=8", ...}]}
    sacct:  {"jobs": [{"job_id": 42, "state": {"current": ["COMPLETED"]},
              "time": {"submission": ..., "start": ..., "end": ...},
              "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 8}]},
              "nodes": "gpu[01-02]", "user": "alice", "partition": "gpu", ...}]}

Parsable: ``sacct -a -X -P --format=JobID,JobName,User,Partition,State,Submit,Start,
End,NNodes,NCPUS,AllocTRES,ReqTRES,NodeList`` (any subset and order; the header names
the columns; times are ISO local time, or epoch seconds with ``SLURM_TIME_FORMAT=%s``).

The VC is the job's **account** (``--account``; Slurm's unit of fair share, as a Helios
VC), else its partition; ``--slurm-vc partition`` swaps the order (see docs/slurm.md).
The partition and the requested time limit (``TimeLimit``) travel as ``partition`` and
``time_limit_s``. GPUs come from the allocated TRES (``gres/gpu=N``), else the
requested TRES, else ``tres_per_job`` / ``tres_per_node`` x nodes.

>>> parse_slurm('{"jobs": [{"job_id": 1, "job_state": ["PENDING"], "partition": "gpu",'
...             ' "submit_time": {"set": true, "number": 5}, "tres_req_str": "gres/gpu=4"}]}')
[SchedJob(job_id='1', status='pending', final=None, submit_time=5.0, start_time=None, \
end_time=None, user=None, vc='gpu', name=None, num_gpus=4, num_cpus=None, num_nodes=None, \
nodes=(), partition='gpu', time_limit_s=None)]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from datetime import datetime
from typing import Any

from gpuhint.cores.job_tracker import SchedJob, SchedulerError, expand_hostlist
from gpuhint.slurm.fields import (
    VcFrom,
    gpus_from_tres,
    map_state,
    parse_timelimit,
    vc_name,
)

__all__ = [
    "SACCT_CMD",
    "SQUEUE_CMD",
    "VcFrom",
    "expand_tasks",
    "gpus_from_gres",
    "gpus_from_tres",
    "map_state",
    "parse_slurm",
    "parse_timelimit",
    "slurm_source",
    "vc_name",
]

log = logging.getLogger(__name__)

SQUEUE_CMD = ("squeue", "--all", "--states=all", "--json")
SACCT_CMD = ("sacct", "--json", "--allusers", "--allocations", "--starttime", "now-1hours")


def _unwrap(v: Any) -> Any:
    """A Slurm number is plain or ``{"set", "infinite", "number"}``: the plain value or None."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    return None if isinstance(v, bool) else v


def _num(v: Any) -> float | None:
    """A Slurm number as a float; 0 or unset -> None."""
    v = _unwrap(v)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f > 0 else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def _index(v: Any) -> int | None:
    """Like :func:`_int` but 0 is a value (array task 0), only unset is None."""
    v = _unwrap(v)
    if v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def gpus_from_gres(spec: str | None) -> int | None:
    """GPUs in a per-node/per-job GRES spec (``gres/gpu:2``, ``gres:gpu:a100:2``, ``gpu``).

    >>> gpus_from_gres("gres/gpu:a100:2"), gpus_from_gres("gpu"), gpus_from_gres("N/A")
    (2, 1, None)
    """
    if not spec or spec in ("N/A", "(null)"):
        return None
    n = 0
    found = False
    for item in spec.split(","):
        item = item.strip()
        for prefix in ("gres/", "gres:", "tres/", "tres:"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        parts = item.replace("=", ":").split(":")
        if parts[0] != "gpu":
            continue
        found = True
        n += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return n if found else None


def _first(v: Any) -> str | None:
    if isinstance(v, list):
        v = v[0] if v else None
    if v in (None, ""):
        return None
    return str(v)


def _limit_minutes(v: Any) -> float | None:
    """A Slurm time limit in minutes (plain or ``{set, infinite, number}``) -> seconds."""
    if isinstance(v, dict) and v.get("infinite"):
        return None
    m = _num(v)
    return m * 60.0 if m is not None else None


def expand_tasks(spec: Any) -> list[int]:
    """Array task ids of a pending array record: ``1-9%2``, ``1,3,5-7`` or a hex bitmap.

    >>> expand_tasks("2-3"), expand_tasks("1,4-5%2"), expand_tasks("0xC")
    ([2, 3], [1, 4, 5], [2, 3])
    """
    if spec in (None, "", "N/A"):
        return []
    text = str(spec).split("%")[0].strip()
    if text.lower().startswith("0x"):
        bits = int(text, 16)
        return [i for i in range(bits.bit_length()) if bits >> i & 1]
    out: list[int] = []
    for rng in text.split(","):
        rng = rng.split(":")[0]  # a step (1-9:2) is not expanded further here
        lo, _, hi = rng.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _with_tasks(job: SchedJob, array_id: int | None, tasks: list[int]) -> list[SchedJob]:
    """A pending array record -> one pending job per task (``123_4``); else ``[job]``."""
    if not array_id or not tasks:
        return [job]
    return [dataclasses.replace(job, job_id=f"{array_id}_{t}") for t in tasks]


def _squeue_job(j: dict[str, Any], vc_from: VcFrom = "account") -> list[SchedJob]:
    mapped = map_state(j.get("job_state"))
    if mapped is None or j.get("job_id") is None:
        return []
    status, final = mapped
    node_count = _int(j.get("node_count"))
    gpus = gpus_from_tres(j.get("tres_alloc_str")) or gpus_from_tres(j.get("tres_req_str"))
    if gpus is None:
        gpus = gpus_from_gres(j.get("tres_per_job"))
    if gpus is None:
        per_node = gpus_from_gres(j.get("tres_per_node"))
        gpus = per_node * (node_count or 1) if per_node is not None else 0
    partition = _first(j.get("partition"))
    cpus = _int(j.get("cpus"))
    nodes = expand_hostlist(j.get("nodes")) if status != "pending" else ()
    job = SchedJob(
        job_id=_job_id(j),
        status=status,
        final=final,
        submit_time=_num(j.get("submit_time")),
        start_time=_ran_from(status, nodes, j.get("start_time")),
        end_time=_num(j.get("end_time")) if status == "finished" else None,
        user=_first(j.get("user_name")),
        vc=vc_name(_first(j.get("account")), partition, vc_from),
        name=_first(j.get("name")),
        num_gpus=gpus,
        num_cpus=cpus,
        num_nodes=node_count,
        nodes=nodes,
        partition=partition,
        time_limit_s=_limit_minutes(j.get("time_limit")),
    )
    if status == "pending" and _index(j.get("array_task_id")) is None:
        return _with_tasks(
            job, _int(j.get("array_job_id")), expand_tasks(j.get("array_task_string"))
        )
    return [job]


def _ran_from(status: str, nodes: tuple[str, ...], start: Any) -> float | None:
    """A job's start time, None when it never ran: pending, or finished without ever
    being given nodes (Slurm 22.05's squeue sets a job cancelled while pending
    ``start_time`` = ``end_time``, the cancel time, and leaves ``nodes`` empty)."""
    if status == "pending" or (status == "finished" and not nodes):
        return None
    return _num(start)


def _job_id(j: dict[str, Any]) -> str:
    """``123``; for an array task ``123_4``, for a heterogeneous job's component ``123+1``
    (Slurm's own notation: ``squeue -o %i``, ``sacct -P``, ``scontrol update jobid=``)."""
    het = j.get("het")
    het_id, offset = (
        (_int(het.get("job_id")), _index(het.get("job_offset")))
        if isinstance(het, dict)
        else (_int(j.get("het_job_id")), _index(j.get("het_job_offset")))
    )
    if het_id and offset is not None:
        return f"{het_id}+{offset}"
    array_id = _int(j.get("array_job_id"))
    task = _index(j.get("array_task_id"))
    arr = j.get("array")
    if isinstance(arr, dict):
        array_id = array_id or _int(arr.get("job_id"))
        task = task if task is not None else _index(arr.get("task_id"))
    if array_id and task is not None:
        return f"{array_id}_{task}"
    return str(j["job_id"])


def _sacct_job(j: dict[str, Any], vc_from: VcFrom = "account") -> list[SchedJob]:
    st = j.get("state")
    raw = st.get("current") if isinstance(st, dict) else st
    mapped = map_state(raw)
    if mapped is None or j.get("job_id") is None:
        return []
    status, final = mapped
    t = j.get("time") or {}
    tres = j.get("tres") or {}
    gpus = _gpus_from_tres_list(tres.get("allocated"))
    if not gpus:
        gpus = _gpus_from_tres_list(tres.get("requested")) or 0
    cpus = None
    req = j.get("required")
    if isinstance(req, dict):
        cpus = _int(req.get("CPUs"))
    assoc = j.get("association") or {}
    user = j.get("user") or assoc.get("user")
    partition = _first(j.get("partition"))
    account = _first(j.get("account")) or _first(assoc.get("account"))
    nodes = expand_hostlist(j.get("nodes")) if status != "pending" else ()
    job = SchedJob(
        job_id=_job_id(j),
        status=status,
        final=final,
        submit_time=_num(t.get("submission")),
        start_time=_ran_from(status, nodes, t.get("start")),
        end_time=_num(t.get("end")) if status == "finished" else None,
        user=user or None,
        vc=vc_name(account, partition, vc_from),
        name=_first(j.get("name")),
        num_gpus=gpus,
        num_cpus=cpus,
        num_nodes=_int(j.get("allocation_nodes")),
        nodes=nodes,
        partition=partition,
        time_limit_s=_limit_minutes(t.get("limit")),
    )
    arr: dict[str, Any] = j["array"] if isinstance(j.get("array"), dict) else {}
    if status == "pending" and _index(arr.get("task_id")) is None:
        return _with_tasks(job, _int(arr.get("job_id")), expand_tasks(arr.get("task")))
    return [job]


def _gpus_from_tres_list(items: Any) -> int | None:
    if not isinstance(items, list):
        return None
    total = None
    typed = 0
    for it in items:
        if not isinstance(it, dict) or it.get("type") != "gres":
            continue
        name = str(it.get("name") or "")
        count = int(_num(it.get("count")) or 0)
        if name == "gpu":
            total = count
        elif name.startswith("gpu:"):
            typed += count
    return total if total is not None else (typed or None)


def _parse_time(s: str) -> float | None:
    s = s.strip()
    if not s or s in ("Unknown", "None", "N/A"):
        return None
    if s.isdigit():
        return float(s) or None
    try:
        return datetime.fromisoformat(s).timestamp()  # naive = local time, as sacct prints
    except ValueError:
        return None


_ARRAY_PENDING = re.compile(r"^(\d+)_\[([^\]]+)\]$")


_FREE_TEXT = {"jobname", "comment", "admincomment", "systemcomment", "workdir", "constraints"}
"""Parsable columns a user writes, which may hold the separator (sacct does not escape it)."""


def _row(header: list[str], line: str) -> dict[str, str] | None:
    """One ``sacct -P`` row by column; a ``|`` inside a job name (or another free-text
    column) is put back. None (logged) when more than one free-text column could hold it."""
    cells = line.split("|")
    extra = len(cells) - len(header)
    if extra > 0:
        free = [i for i, h in enumerate(header) if h in _FREE_TEXT]
        if len(free) != 1:
            log.warning("sacct row skipped: %d '|' too many, column unknown: %.200s", extra, line)
            return None
        i = free[0]
        cells = [*cells[:i], "|".join(cells[i : i + extra + 1]), *cells[i + extra + 1 :]]
    return dict(zip(header, cells, strict=False))


def _parsable(text: str, vc_from: VcFrom = "account") -> list[SchedJob]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [h.strip().lower() for h in lines[0].split("|")]
    if "jobid" not in header or "state" not in header:
        raise SchedulerError(
            "parsable Slurm output needs a header with at least JobID and State "
            "(sacct -P --format=JobID,State,...)"
        )
    out: list[SchedJob] = []
    for ln in lines[1:]:
        row = _row(header, ln)
        if row is None:
            continue
        job_id = row.get("jobid", "")
        if not job_id or "." in job_id:  # job steps (123.batch, 123.0)
            continue
        mapped = map_state(row.get("state"))
        if mapped is None:
            continue
        status, final = mapped
        gpus = gpus_from_tres(row.get("alloctres")) or gpus_from_tres(row.get("reqtres")) or 0
        partition = row.get("partition") or None
        try:
            limit = parse_timelimit(row.get("timelimit"))
        except ValueError:
            limit = None
        nodes = expand_hostlist(row.get("nodelist")) if status != "pending" else ()
        start = _parse_time(row.get("start", "")) if status != "pending" else None
        job = SchedJob(
            job_id=job_id,
            status=status,
            final=final,
            submit_time=_parse_time(row.get("submit", "")),
            # without a NodeList column, a finished job's Start is all there is
            start_time=_ran_from(status, nodes, start) if "nodelist" in row else start,
            end_time=_parse_time(row.get("end", "")) if status == "finished" else None,
            user=row.get("user") or None,
            vc=vc_name(row.get("account") or None, partition, vc_from),
            name=row.get("jobname") or None,
            num_gpus=gpus,
            num_cpus=_int(row.get("ncpus")),
            num_nodes=_int(row.get("nnodes")),
            nodes=nodes,
            partition=partition.split(",")[0] if partition else None,
            time_limit_s=limit,
        )
        m = _ARRAY_PENDING.match(job_id)
        out.extend(_with_tasks(job, int(m[1]), expand_tasks(m[2])) if m else [job])
    return out


def parse_slurm(text: str, vc_from: VcFrom = "account") -> list[SchedJob]:
    """Jobs in one snapshot: squeue/sacct JSON or sacct parsable output (detected).

    A pending job array becomes one pending job per task (``123_4``), as Slurm names
    each task once it runs. A job listed more than once (each run of a requeued job is
    a record of its own) is its newest record.
    """
    stripped = text.lstrip()
    if not stripped:
        return []
    if not stripped.startswith("{"):
        return _newest(_parsable(text, vc_from))
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchedulerError(f"Slurm JSON does not parse: {exc}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        errs = doc.get("errors") if isinstance(doc, dict) else None
        raise SchedulerError(f"Slurm JSON has no 'jobs' list{f' (errors: {errs})' if errs else ''}")
    out: list[SchedJob] = []
    for j in jobs:
        if not isinstance(j, dict):
            continue
        if isinstance(j.get("state"), dict) or "job_state" not in j:
            out.extend(_sacct_job(j, vc_from))
        else:
            out.extend(_squeue_job(j, vc_from))
    return _newest(out)


def _newest(jobs: list[SchedJob]) -> list[SchedJob]:
    """One row per job id: the latest submitted (ties: the last listed). sacct --json
    (22.05, even without ``-D``) lists every run of a requeued job (the old ones REQUEUED,
    or another state of an ended run); a requeue resets the submit time, so the newest is
    the current run."""
    best: dict[str, SchedJob] = {}
    for j in jobs:
        old = best.get(j.job_id)
        if old is None or (j.submit_time or 0.0) >= (old.submit_time or 0.0):
            best[j.job_id] = j
    return jobs if len(best) == len(jobs) else [j for j in jobs if best[j.job_id] is j]


def slurm_source(spec: str) -> str | tuple[str, ...]:
    """``squeue`` / ``sacct`` -> their command; ``cmd:...`` or a file path as given."""
    if spec == "squeue":
        return SQUEUE_CMD
    if spec == "sacct":
        return SACCT_CMD
    return spec
