"""Slurm nodes -> NodeStatus: CES telemetry for a Slurm site without a node agent per host.

The worker's CES engine counts busy and powered-down nodes from
:class:`~gpuhint.wire.contract.NodeStatus` records, which the NVML node agent sends from
each GPU host. A Slurm site can send them from the controller instead: one
``sinfo -N --json`` per poll gives every node's GPUs (``gres``), the GPUs in use
(``gres_used``), its power state and its health, as Slurm sees them::

    gpuhint agent --nvml none --slurm sacct --slurm-nodes sinfo --bootstrap kafka:9092

Run one or the other for a cluster, not both (they would report the same nodes twice).

>>> text = ('{"nodes": [{"name": "n1", "state": "mixed", "state_flags": [],'
...         ' "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:3(IDX:0-2)"},'
...         ' {"name": "n2", "state": "idle", "state_flags": ["POWERED_DOWN"],'
...         ' "gres": "gpu:8", "gres_used": "gpu:0"}]}')
>>> [(s.node, s.num_gpus, s.busy_gpus, s.powered_on, s.healthy)
...  for s in parse_sinfo(text, cluster="c", now=0.0)]
[('n1', 8, 3, True, True), ('n2', 8, 0, False, True)]
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuhint.cores.job_tracker import (
    SchedulerError,
    expand_hostlist,
    guarded_read,
    read_source,
)
from gpuhint.wire.contract import MAX_LIST, NodeStatus

log = logging.getLogger(__name__)

SINFO_CMD = ("sinfo", "-N", "--json")
"""The default source: every node, one record each (Slurm 22.05+; ``-N``: one entry per
node, not per group of alike nodes, in the data_parser output of later releases)."""

_PARENS = re.compile(r"\([^)]*\)")
_OFF = {"POWERED_DOWN", "POWER_DOWN", "POWERING_UP", "POWER_UP"}
"""Power flags of a node that does not run jobs now (off, or still booting)."""
_SICK_STATES = {"DOWN", "FAIL", "FAILING", "UNKNOWN", "FUTURE", "INVAL"}
_SICK_FLAGS = {"DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "MAINTENANCE"}


def gres_gpus(gres: str | None) -> int:
    """GPUs in a node's ``gres`` or ``gres_used`` string (types summed; other GRES ignored).

    >>> gres_gpus("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3),shard:8"), gres_gpus("gpu:4")
    (3, 4)
    """
    total = 0
    for item in _PARENS.sub("", gres or "").split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        try:
            total += int(parts[-1]) if len(parts) > 1 else 1
        except ValueError:
            total += 0  # "gpu:(null)" and the like: no count
    return total


def _flags(node: dict[str, Any]) -> tuple[str, set[str]]:
    """(base state, flags), from 22.05's ``state`` + ``state_flags`` or 23.02+'s list."""
    raw = node.get("state")
    states = [str(s).upper() for s in (raw if isinstance(raw, list) else [raw or ""])]
    flags = {str(f).upper() for f in node.get("state_flags") or ()}
    base = states[0] if states else ""
    return base, flags | set(states[1:])


def node_status(node: dict[str, Any], *, cluster: str, now: float) -> NodeStatus:
    """One sinfo node as a NodeStatus."""
    base, flags = _flags(node)
    num = gres_gpus(node.get("gres"))
    return NodeStatus(
        cluster=cluster,
        node=str(node["name"]),
        time=now,
        num_gpus=num,
        busy_gpus=min(num, gres_gpus(node.get("gres_used"))),
        powered_on=not (flags & _OFF),
        healthy=base not in _SICK_STATES and not (flags & _SICK_FLAGS),
    )


def parse_sinfo(text: str, *, cluster: str, now: float) -> list[NodeStatus]:
    """Every node of a ``sinfo --json`` document (SchedulerError when it is not one):
    22.05's ``nodes`` list, or the ``sinfo`` list of later releases (data_parser, e.g. 24.11)."""
    try:
        doc = json.loads(text)
        nodes = _grouped_nodes(doc["sinfo"]) if "sinfo" in doc else doc["nodes"]
        return [node_status(n, cluster=cluster, now=now) for n in nodes if n.get("name")]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SchedulerError(f"not sinfo --json output: {exc}") from None


def _grouped_nodes(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """data_parser's ``sinfo`` entries (one per node and partition with ``-N``) as
    22.05's node records, each node once."""
    out: dict[str, dict[str, Any]] = {}
    for g in groups:
        gres = g.get("gres") or {}
        for spec in (g.get("nodes") or {}).get("nodes") or ():
            for name in expand_hostlist(str(spec)):
                out.setdefault(
                    name,
                    {
                        "name": name,
                        "state": (g.get("node") or {}).get("state"),
                        "gres": gres.get("total"),
                        "gres_used": gres.get("used"),
                    },
                )
    return list(out.values())


@dataclass
class SlurmNodeFeed:
    """Polls a node source (``sinfo --json``, a file, or ``cmd:...``) into NodeStatus records;
    ``running_on`` names each node's running jobs (the job feed's tracker knows them)."""

    source: str | Sequence[str]
    cluster: str
    running_on: Callable[[str], list[str]] | None = None
    timeout_s: float = 60.0
    name: str = "slurm-nodes"
    failures: int = field(default=0)

    def poll(self, now: float) -> list[NodeStatus]:
        found = guarded_read(
            self,
            lambda: parse_sinfo(
                read_source(self.source, timeout_s=self.timeout_s), cluster=self.cluster, now=now
            ),
        )
        if found is None:
            return []
        if self.running_on is None:
            return found
        return [
            s.model_copy(update={"running_jobs": tuple(sorted(self.running_on(s.node)))[:MAX_LIST]})
            for s in found
        ]


def slurm_node_source(spec: str) -> str | tuple[str, ...]:
    """``--slurm-nodes`` value -> a source: ``sinfo`` (the default command), a file, ``cmd:...``."""
    return SINFO_CMD if spec == "sinfo" else spec
