"""Slurm's job fields, read the same way by the agent and the sacct trace reader (pure).

>>> map_state("CANCELLED by 1000"), map_state("CG")
(('finished', <JobState.CANCELLED: 'CANCELLED'>), ('running', None))
"""

from __future__ import annotations

import re
from typing import Literal

from gpuhint.wire.contract import JobState

Status = Literal["pending", "running", "finished"]

_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_FINAL = {
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "PREEMPTED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "BOOT_FAIL": JobState.NODE_FAIL,
}
_SHORT = {  # squeue/sacct compact codes
    "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "ST": "STOPPED", "CD": "COMPLETED",
    "F": "FAILED",
    "OOM": "OUT_OF_MEMORY", "CA": "CANCELLED", "PR": "PREEMPTED", "TO": "TIMEOUT",
    "DL": "DEADLINE", "NF": "NODE_FAIL", "BF": "BOOT_FAIL", "RV": "REVOKED", "SE": "SPECIAL_EXIT",
    "CG": "COMPLETING", "CF": "CONFIGURING", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD",
    "RF": "REQUEUE_FED", "SO": "STAGE_OUT", "SI": "SIGNALING", "RS": "RESIZING",
}  # fmt: skip


def map_state(raw: str | list[str] | None) -> tuple[Status, JobState | None] | None:
    """Slurm state(s) -> (status, final state); None for a state we do not track."""
    names = raw if isinstance(raw, list) else [raw or ""]
    for name in names:
        base = str(name).strip().split(" ")[0].upper()  # "CANCELLED by 1000"
        base = _SHORT.get(base, base).rstrip("+")
        if base in _PENDING:
            return "pending", None
        if base in _RUNNING:
            return "running", None
        if base in _FINAL:
            return "finished", _FINAL[base]
    return None


def gpus_from_tres(tres: str | None) -> int | None:
    """GPUs in a TRES string (``cpu=8,gres/gpu=2`` or ``gres/gpu:a100=2``); None if absent.

    >>> gpus_from_tres("cpu=8,mem=16G,node=1,billing=8,gres/gpu=2,gres/gpu:a100=2")
    2
    >>> gpus_from_tres("gres/gpu:a100=2,gres/gpu:v100=1"), gpus_from_tres("cpu=4")
    (3, None)
    """
    if not tres:
        return None
    total = None
    typed = 0
    found_typed = False
    for item in tres.split(","):
        key, _, val = item.strip().partition("=")
        if key == "gres/gpu":
            total = int(float(val or 0))
        elif key.startswith("gres/gpu:"):
            typed += int(float(val or 0))
            found_typed = True
    if total is not None:
        return total
    return typed if found_typed else None


VcFrom = Literal["account", "partition"]


def vc_name(account: str | None, partition: str | None, vc_from: VcFrom = "account") -> str:
    """The VC of a Slurm job: its account (default), else its partition, else ``default``.

    With ``vc_from="partition"`` the partition comes first. Characters a Redis key cannot
    hold (``:`` and whitespace) become ``_``.

    >>> vc_name("nlp", "gpu"), vc_name(None, "gpu,debug"), vc_name("a b", None, "partition")
    ('nlp', 'gpu', 'a_b')
    """
    part = (partition or "").split(",")[0] or None
    order = (account, part) if vc_from == "account" else (part, account)
    name = next((x for x in order if x), "default")
    return re.sub(r"[:\s]", "_", name)[:128]


def parse_timelimit(text: str | None) -> float | None:
    """sacct/squeue ``Timelimit`` (``[D-]HH:MM:SS``, ``D-HH[:MM]``, ``MM:SS``, ``MM``) -> seconds.

    >>> parse_timelimit("1-02:00:00"), parse_timelimit("30:00"), parse_timelimit("UNLIMITED")
    (93600.0, 1800.0, None)
    """
    t = (text or "").strip()
    if not t or t.upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE", "N/A"):
        return None
    days, with_days = 0, "-" in t
    if with_days:
        d, _, t = t.partition("-")
        days = int(d)
    parts = [int(float(x)) for x in t.split(":")] if t else [0]
    if with_days and len(parts) < 3:  # D-HH, D-HH:MM
        secs = parts[0] * 3600 + (parts[1] * 60 if len(parts) > 1 else 0)
    elif len(parts) == 1:  # minutes
        secs = parts[0] * 60
    elif len(parts) == 2:
        secs = parts[0] * 60 + parts[1]
    else:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    total = days * 86400 + secs
    return float(total) if total > 0 else None
