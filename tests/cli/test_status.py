"""``gpuhint status``'s verdict from its checks (no Kafka or Redis needed)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpuhint.cli.status import OK, Check, assess


def _checks(events_age: float, job_event_lag: int, hint_age: float) -> dict[str, Check]:
    return {
        "worker": Check(OK, "group gpuhint: 1 member(s), Stable", {"lag": job_event_lag}),
        "job events": Check(
            OK, "newest on gpuhint.job-events", {"age_s": events_age, "lag": job_event_lag}
        ),
        "hints": Check(OK, "newest", {"age_s": hint_age}),
    }


def test_a_quiet_queue_with_every_event_handled_is_healthy() -> None:
    """Jobs finish (job events flow) but nobody submits: no hint is written, and the
    worker has handled every event (lag 0). That is not 'hints do not follow'."""
    code, problems = assess(_checks(events_age=5, job_event_lag=0, hint_age=3600), 300)
    assert (code, problems) == (0, [])


def test_events_waiting_while_the_hints_are_old_is_degraded() -> None:
    code, problems = assess(_checks(events_age=5, job_event_lag=40, hint_age=3600), 300)
    assert code == 1 and any("job events arrive" in p for p in problems)


def test_events_dead_lettered_since_the_newest_hint_are_degraded() -> None:
    """All handled (lag 0), but into the dead-letter topic: hints do not follow."""
    checks = _checks(events_age=5, job_event_lag=0, hint_age=3600)
    checks["job events"].data["dead_letter_age_s"] = 6.0
    code, problems = assess(checks, 300)
    assert code == 1 and any("job events arrive" in p for p in problems)
    checks["hints"] = Check("none", "no hint yet", {"waiting": 0})
    assert assess(checks, 300)[0] == 1
    checks["job events"].data["dead_letter_age_s"] = 7200.0  # an old one: before the hint
    checks["hints"] = Check(OK, "newest", {"age_s": 3600})
    assert assess(checks, 300) == (0, [])


def test_kafka_facts_reads_the_dead_letters_newest_time_but_not_their_lag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody consumes the dead-letter topic: its end offsets are no worker lag."""
    import kafka.admin

    from gpuhint.cli.status import kafka_facts
    from gpuhint.wire.config import load_settings

    class Offset:
        def __init__(self, offset: int, timestamp: int = -1) -> None:
            self.offset, self.timestamp = offset, timestamp

    class Admin:
        def __init__(self, **_: object) -> None:
            pass

        def list_topics(self) -> list[str]:
            return ["gpuhint.job-events", "gpuhint.node-status", "gpuhint.dead-letter"]

        def describe_topics(self, names: list[str]) -> list[dict[str, object]]:
            return [{"name": n, "partitions": [{"partition_index": 0}]} for n in names]

        def list_partition_offsets(self, specs: dict[Any, Any]) -> dict[Any, Offset]:
            return {tp: Offset(100, 1_000_000 + len(tp.topic)) for tp in specs}

        def describe_groups(self, ids: list[str]) -> dict[str, Any]:
            return {"gpuhint": {"group_state": "Stable", "members": [1]}}

        def list_group_offsets(self, specs: dict[str, Any]) -> dict[str, Any]:
            return {"gpuhint": {tp: Offset(100) for tp in specs["gpuhint"]}}

        def close(self) -> None:
            pass

    for name in [n for n in os.environ if n.upper().startswith("GPUHINT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(kafka.admin, "KafkaAdminClient", Admin)
    facts = kafka_facts(load_settings(), 1.0)
    assert facts["lag"] == {"gpuhint.job-events": 0, "gpuhint.node-status": 0}
    assert set(facts["newest_ms"]) == {
        "gpuhint.job-events", "gpuhint.node-status", "gpuhint.dead-letter"
    }  # fmt: skip


def test_the_redis_address_shown_is_the_one_used_without_the_password() -> None:
    from gpuhint.cli.status import _where

    assert _where("redis://:pw@r:6380/2") == "redis://r:6380/2"
    assert _where("unix://:pw@/run/redis.sock?db=1") == "unix:///run/redis.sock"
    assert _where("rediss://u:pw@[::1]:6379/0") == "rediss://[::1]:6379/0"
