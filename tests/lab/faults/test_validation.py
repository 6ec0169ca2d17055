"""Strict validation at the edge: every hostile class is rejected, every real event accepted."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuhint.lab.faults.hostile import CLASSES, hostile_messages
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.config import ConfigError, load_settings
from gpuhint.wire.contract import (
    MAX_DURATION_S,
    InvalidMessage,
    JobEvent,
    JobPhase,
    Limits,
    decode_job_event,
    decode_message,
    encode_message,
)

DATA = Path(__file__).resolve().parents[2] / "data"
SHIPPED = Path(__file__).resolve().parents[3] / "gpuhint" / "data"
NOW = 1.7e9
GOOD = {
    "schema_version": 1,
    "kind": "job",
    "phase": "submitted",
    "job_id": "j1",
    "cluster": "c",
    "vc": "v",
    "user": "alice",
    "num_gpus": 8,
    "time": NOW - 1000,
    "submit_time": NOW - 1000,
}
LIMITS = Limits(clock=lambda: NOW)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_hostile_class_is_rejected_in_one_line(name: str) -> None:
    raw = CLASSES[name](GOOD, random.Random(0))
    with pytest.raises(InvalidMessage) as err:
        decode_job_event(raw, LIMITS)
    assert "\n" not in err.value.reason and len(err.value.reason) < 300


def test_a_mixed_flood_is_all_rejected() -> None:
    for _, raw in hostile_messages(GOOD, 2000, seed=7):
        with pytest.raises(InvalidMessage):
            decode_job_event(raw, LIMITS)


@pytest.mark.parametrize(
    "trace",
    [
        DATA / "venus_qssf_300.csv",
        DATA / "philly_excerpt.json",
        SHIPPED / "venus_sept_2vc.csv",
        SHIPPED / "philly_excerpt.json",
    ],
    ids=lambda p: p.name,
)
def test_every_event_of_the_real_traces_is_accepted(trace: Path) -> None:
    read = read_trace(trace, "auto", "skip")
    events = job_events(read.jobs, cluster="c")
    assert events
    for ev in events:
        assert decode_job_event(encode_message(ev)) == ev


def test_the_boundaries_are_accepted() -> None:
    worst = dict(
        GOOD,
        phase="finished",
        num_gpus=LIMITS.max_gpus,
        user="u" * 256,
        name="n" * 256,
        job_id="j" * 256,
        nodes=[f"node-{i:04d}" for i in range(LIMITS.max_nodes)],
        submit_time=NOW - MAX_DURATION_S - 10,
        time=NOW + LIMITS.max_future_s,
        start_time=NOW - MAX_DURATION_S,
        duration_s=MAX_DURATION_S,
        state="COMPLETED",
    )
    ev = decode_job_event(json.dumps(worst).encode(), LIMITS)
    assert ev.num_gpus == LIMITS.max_gpus and ev.duration_s == MAX_DURATION_S
    # int for a float is not a coercion: JSON has one number type
    whole = json.dumps(dict(GOOD, time=1_600_000_000, submit_time=1_600_000_000))
    assert decode_job_event(whole, LIMITS).time == 1.6e9


def test_the_cluster_maximum_comes_from_the_settings() -> None:
    raw = json.dumps(dict(GOOD, num_gpus=4096)).encode()
    with pytest.raises(InvalidMessage, match="cluster maximum 2048"):
        decode_job_event(raw, load_settings().limits)
    big = load_settings(max_gpus_per_job=8192).limits
    assert decode_job_event(raw, big).num_gpus == 4096


def test_limits_of_size_and_nesting_are_checked_before_parsing() -> None:
    small = Limits(max_bytes=2048, max_depth=4, clock=lambda: NOW)
    with pytest.raises(InvalidMessage, match="exceeds 2048"):
        decode_message(json.dumps(dict(GOOD, name="x" * 3000)), small)
    deep = b'{"schema_version": 1, "kind": "job", "x": [[[[[1]]]]]}'
    with pytest.raises(InvalidMessage, match="deeper than 4"):
        decode_message(deep, small)
    # brackets inside strings do not count
    ok = json.dumps(dict(GOOD, name="[[[[[[{{{{{{")).encode()
    assert decode_job_event(ok, small).name == "[[[[[[{{{{{{"


def test_in_process_events_keep_the_hard_caps() -> None:
    with pytest.raises(ValidationError):
        JobEvent(phase=JobPhase.SUBMITTED, job_id="1", num_gpus=10**6, time=0, submit_time=0)
    with pytest.raises(ValidationError):
        JobEvent(phase=JobPhase.SUBMITTED, job_id="1", time=float("nan"), submit_time=0)
    with pytest.raises(ValidationError):
        JobEvent(phase=JobPhase.FINISHED, job_id="1", time=9, submit_time=0, duration_s=4e7)


def test_decode_never_raises_anything_but_invalid_message() -> None:
    rng = random.Random(3)
    good = encode_message(JobEvent.model_validate(GOOD))
    for _ in range(3000):
        raw = bytearray(good)
        for _ in range(rng.randrange(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        try:
            ev = decode_job_event(bytes(raw), LIMITS)
        except InvalidMessage:
            continue
        assert ev.num_gpus <= LIMITS.max_gpus and ev.time <= NOW + LIMITS.max_future_s


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"kafka_bootstrap": "SASL_SSL://k:9093"}, "GPUHINT_KAFKA_SECURITY_PROTOCOL"),
        ({"kafka_security_protocol": "SASL_SSL"}, "needs GPUHINT_KAFKA_SASL_MECHANISM"),
        ({"kafka_security_protocol": "TLS"}, "kafka_security_protocol"),
        (
            {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI"},
            "kafka_sasl_mechanism",
        ),
        ({"kafka_sasl_username": "u"}, "SASL settings are given"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_cafile": "/nope.pem"}, "not a readable"),
        ({"redis_url": "redis://localhost:6379/abc"}, "Redis db 'abc'"),
        ({"redis_url": "redis://localhost:6379/99"}, "Redis db '99'"),
    ],
)
def test_unsupported_security_settings_are_refused(overrides: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_settings(**overrides)


def test_sasl_settings_reach_the_clients_and_the_password_stays_secret() -> None:
    from streams.kafka_io import aiokafka_client_config, faust_credentials, kafka_client_config

    s = load_settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="gpuhint",
        kafka_sasl_password="hunter2",
    )
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.model_dump())
    cfg = kafka_client_config(s)
    assert cfg["security_protocol"] == "SASL_SSL"
    assert cfg["sasl_mechanism"] == "SCRAM-SHA-512"
    assert cfg["sasl_plain_password"] == "hunter2"
    aio = aiokafka_client_config(s)
    assert aio["sasl_plain_password"] == "hunter2" and aio["security_protocol"] == "SASL_SSL"
    assert aio["sasl_mechanism"] == "SCRAM-SHA-512" and aio["ssl_context"] is not None
    creds = faust_credentials(s)
    assert creds.mechanism.value == "SCRAM-SHA-512" and creds.protocol.value == "SASL_SSL"
    assert "hunter2" not in repr(creds)
