"""Slurm nodes -> NodeStatus: sinfo --json of 22.05 and of 23.02+, health and power flags."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpuhint.cores.job_tracker import SchedulerError
from gpuhint.slurm.nodes import SlurmNodeFeed, gres_gpus, parse_sinfo

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _one(**node: object) -> str:
    return json.dumps({"nodes": [{"name": "g1", "gres": "gpu:4", "gres_used": "gpu:1", **node}]})


def test_captured_2205_output() -> None:
    got = parse_sinfo((DATA / "sinfo_2205.json").read_text(), cluster="c", now=5.0)
    assert [(s.node, s.busy_gpus, s.powered_on, s.healthy) for s in got] == [
        ("n1", 3, True, True),
        ("n2", 0, True, True),
        ("n3", 0, False, True),
    ]
    assert {s.cluster for s in got} == {"c"} and {s.time for s in got} == {5.0}


@pytest.mark.parametrize(
    ("node", "powered_on", "healthy"),
    [
        ({"state": "idle", "state_flags": ["POWERING_UP"]}, False, True),
        ({"state": "idle", "state_flags": ["POWERING_DOWN"]}, True, True),
        ({"state": "down", "state_flags": ["NOT_RESPONDING"]}, True, False),
        ({"state": "mixed", "state_flags": ["DRAIN"]}, True, False),
        ({"state": ["IDLE", "POWERED_DOWN"]}, False, True),  # 23.02+: one list
        ({"state": ["MIXED", "DRAIN"]}, True, False),
        ({"state": ["ALLOCATED"]}, True, True),
    ],
)
def test_power_and_health_flags(node: dict[str, object], powered_on: bool, healthy: bool) -> None:
    (s,) = parse_sinfo(_one(**node), cluster="c", now=0.0)
    assert (s.powered_on, s.healthy) == (powered_on, healthy)


def test_gres_counts() -> None:
    assert gres_gpus("gpu:a100:4(S:0-1),gpu:v100:2(S:0)") == 6
    assert gres_gpus("gpu:a100:2(IDX:0,2),shard:gpu:8") == 2  # commas inside IDX()
    assert gres_gpus("gpu:(null):0(IDX:N/A)") == 0
    assert gres_gpus(None) == 0
    (s,) = parse_sinfo(_one(state="mixed", gres="gpu:2", gres_used="gpu:5"), cluster="c", now=0)
    assert s.busy_gpus == 2  # never more busy than it has


def test_not_sinfo_output_is_a_scheduler_error() -> None:
    with pytest.raises(SchedulerError, match="not sinfo --json"):
        parse_sinfo('{"jobs": []}', cluster="c", now=0.0)


def test_feed_names_running_jobs_and_survives_a_bad_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sinfo.json"
    path.write_text(_one(state="mixed"))
    feed = SlurmNodeFeed(str(path), cluster="c", running_on=lambda n: ["9", "7"])
    (s,) = feed.poll(1.0)
    assert s.running_jobs == ("7", "9")
    path.write_text("not json")
    with caplog.at_level(logging.WARNING):
        assert feed.poll(2.0) == [] and feed.failures == 1
    path.write_text(_one(state="idle"))
    assert len(feed.poll(3.0)) == 1 and feed.failures == 0
    assert "readable again" in caplog.text


def _group(names: list[str], state: list[str], total: str, used: str, part: str) -> dict:
    """One entry of the ``sinfo`` list that ``sinfo -N --json`` prints on Slurm 24.11."""
    return {
        "port": 6818, "partition": {"name": part}, "node": {"state": state},
        "nodes": {"allocated": 0, "idle": 0, "total": len(names), "nodes": names},
        "gres": {"total": total, "used": used},
    }  # fmt: skip


def test_data_parser_sinfo_output() -> None:
    """Slurm 24.11's ``sinfo --json`` is ``{"sinfo": [...]}``, one entry per node and
    partition (``-N``), no ``nodes`` list: every poll failed before. A node in two
    partitions is one NodeStatus."""
    doc = {
        "sinfo": [
            _group(["g1"], ["MIXED"], "gpu:a100:4(S:0-1)", "gpu:a100:3(IDX:0-2)", "gpu"),
            _group(["g1"], ["MIXED"], "gpu:a100:4(S:0-1)", "gpu:a100:3(IDX:0-2)", "all"),
            _group(["g2"], ["IDLE", "POWERED_DOWN"], "gpu:8", "gpu:0", "gpu"),
            _group(["g3"], ["IDLE", "DRAIN"], "gpu:8", "gpu:0", "gpu"),
        ],
        "meta": {}, "errors": [], "warnings": [],
    }  # fmt: skip
    got = parse_sinfo(json.dumps(doc), cluster="c", now=1.0)
    assert [(s.node, s.num_gpus, s.busy_gpus, s.powered_on, s.healthy) for s in got] == [
        ("g1", 4, 3, True, True),
        ("g2", 8, 0, False, True),
        ("g3", 8, 0, True, False),
    ]
