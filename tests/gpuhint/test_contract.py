from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gpuhint.contract import (
    ClusterLoad,
    GpuSample,
    InvalidMessage,
    JobEvent,
    NodeStatus,
    PowerAction,
    PowerAdvisory,
    PriorityHint,
    decode_job_event,
    decode_message,
    encode_message,
)

MESSAGES = [
    JobEvent(
        phase="finished",
        job_id="1",
        vc="v",
        user="u",
        num_gpus=8,
        time=9.0,
        submit_time=1.0,
        duration_s=8.0,
        state="COMPLETED",
        nodes=("n1",),
        time_limit_s=3600.0,
        partition="gpu",
    ),
    GpuSample(node="n1", gpu_index=0, time=1.0, gpu_util_pct=55.0, xid_errors=(79,)),
    NodeStatus(node="n1", time=1.0, num_gpus=8, busy_gpus=3),
    PriorityHint(
        job_id="1",
        num_gpus=2,
        submit_time=0,
        predicted_duration_s=10,
        priority=20,
        model="m",
        model_version="1",
        created_at=0,
    ),
    PowerAdvisory(time=0, action=PowerAction.POWER_DOWN, count=2, nodes=("a", "b"), reason="idle"),
    ClusterLoad(time=0, total_nodes=10, active_nodes=8, used_nodes=5),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: m.kind)
def test_round_trip(msg: object) -> None:
    raw = encode_message(msg)  # type: ignore[arg-type]
    assert json.loads(raw)["schema_version"] == 1
    assert decode_message(raw) == msg


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"schema_version": 2, "kind": "job"}', "unsupported schema_version 2"),
        (b'{"kind": "job"}', "unsupported schema_version None"),
        (b'{"schema_version": 1, "kind": "recipe"}', "unknown kind"),
        (b'{"schema_version": 1, "kind": "job", "phase": "submitted"}', "job_id"),
    ],
)
def test_invalid_messages_say_why(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        decode_message(raw)
    assert reason in err.value.reason


def test_validation_rejects_nonsense() -> None:
    with pytest.raises(ValidationError):
        JobEvent(phase="submitted", job_id="1", num_gpus=-1, time=0, submit_time=0)
    with pytest.raises(ValidationError):
        JobEvent(phase="submitted", job_id="1", time=0, submit_time=0, colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        GpuSample(node="n", gpu_index=0, time=0, gpu_util_pct=101)


def test_decode_job_event_insists_on_jobs() -> None:
    with pytest.raises(InvalidMessage, match="expected kind 'job'"):
        decode_job_event(encode_message(MESSAGES[2]))
    assert decode_job_event(encode_message(MESSAGES[0])).job_id == "1"


def test_messages_are_frozen() -> None:
    with pytest.raises(ValidationError):
        MESSAGES[0].job_id = "2"  # type: ignore[misc]
