from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gpuhint.wire.contract import (
    ClusterLoad,
    FeatureContribution,
    GpuProcess,
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


_JOB = (
    '{"schema_version": 1, "kind": "job", "phase": "submitted", "job_id": "j1", '
    '"num_gpus": 1, "time": 0.0, "submit_time": 0.0'
)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (_JOB + ', "num_gpus": 2048}', "num_gpus"),  # the last would win
        (_JOB + ', "num_gpus": 1}', "num_gpus"),  # even with the same value
        (_JOB + ', "num_gpus": -5}', "num_gpus"),  # or an invalid one
        (_JOB + ', "schema_version": 1}', "schema_version"),
        (_JOB.replace('"j1"', '"a:b"') + ', "time": 0.0}', "time"),  # ':' in a string
        (_JOB + ', "bogus": 1, "bogus": 2}', "bogus"),
    ],
)
def test_duplicate_keys_are_refused(raw: str, key: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        decode_message(raw)
    assert f"duplicate key {key!r}" in err.value.reason
    with pytest.raises(InvalidMessage, match="duplicate key"):
        decode_job_event(raw.encode())


def test_duplicate_keys_in_nested_objects_are_refused() -> None:
    sample = GpuSample(
        node="n1",
        gpu_index=0,
        time=1.0,
        processes=(GpuProcess(pid=1, used_memory_mb=3.0), GpuProcess(pid=2)),
    )
    raw = encode_message(sample)
    assert decode_message(raw) == sample
    bad = raw.replace(b'"pid":2', b'"pid":2,"pid":3')
    with pytest.raises(InvalidMessage, match="duplicate key 'pid'"):
        decode_message(bad)
    hint = MESSAGES[3].model_copy(
        update={"reasons": (FeatureContribution(feature="a", contribution=1.0),)}
    )
    bad = encode_message(hint).replace(b'"feature":"a"', b'"feature":"a","feature":"b"')
    with pytest.raises(InvalidMessage, match="duplicate key 'feature'"):
        decode_message(bad)


def test_colons_in_strings_are_not_duplicates() -> None:
    ev = MESSAGES[0].model_copy(update={"job_id": "a:b:c", "user": 'x":y', "name": "::"})
    assert decode_message(encode_message(ev)) == ev
    assert decode_message(json.dumps(json.loads(encode_message(ev)), indent=2)) == ev


@pytest.mark.parametrize(
    ("version", "says"),
    [("1.0", "1.0 (a float)"), ("1e0", "1.0 (a float)"), ("true", "true (a boolean)")],
)
def test_schema_version_must_be_the_integer_1(version: str, says: str) -> None:
    raw = _JOB.replace('"schema_version": 1', f'"schema_version": {version}') + "}"
    with pytest.raises(InvalidMessage) as err:
        decode_message(raw)
    assert err.value.reason.startswith(f"unsupported schema_version {says}")
    assert "must be the integer 1" in err.value.reason
    with pytest.raises(ValidationError, match="must be the integer 1"):
        JobEvent(schema_version=1.0, phase="submitted", job_id="1", time=0, submit_time=0)  # type: ignore[arg-type]
    assert decode_message(_JOB + "}").schema_version == 1
