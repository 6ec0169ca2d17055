"""``gpuhint hints`` reads back what the worker wrote, from a real Redis."""

from __future__ import annotations

import json

import pytest
import redis

from gpuhint.cli import main
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ClusterLoad, PowerAction, PowerAdvisory, PriorityHint
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def hint(job: str, prio: float, vc: str) -> PriorityHint:
    return PriorityHint(
        job_id=job,
        cluster="c",
        vc=vc,
        num_gpus=2,
        submit_time=0,
        predicted_duration_s=prio / 2,
        priority=prio,
        duration_p10_s=1,
        duration_p90_s=prio,
        model="m",
        model_version="1",
        created_at=0,
    )


def test_hints_shows_each_queue_in_order(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    for job, prio, vc in [("big", 900, "a"), ("small", 30, "a"), ("other", 50, "b")]:
        store.put_hint(hint(job, prio, vc))
    store.put_load(ClusterLoad(cluster="c", time=0, total_nodes=4, active_nodes=3, used_nodes=2))
    store.put_advisory(
        PowerAdvisory(
            cluster="c",
            time=0,
            action=PowerAction.POWER_DOWN,
            count=1,
            nodes=("n3",),
            reason="idle for long",
        )
    )
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["job_id"] for r in out["queues"]["a"]] == ["small", "big"]
    assert out["queues"]["b"][0]["predicted_duration_s"] == 25
    assert out["queue_lengths"] == {"a": 2, "b": 1}
    assert out["load"]["used_nodes"] == 2 and out["advice"]["nodes"] == ["n3"]

    assert (
        main(["hints", "--cluster", "c", "--vc", "a", "--top", "1", "--redis-url", redis_url]) == 0
    )
    text = capsys.readouterr().out
    assert "small" in text and "big" not in text and "power advice: power_down 1 (n3)" in text


def test_hints_without_redis_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hints", "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert "cannot read Redis" in capsys.readouterr().err


def test_hints_follow_prints_changes_from_an_id(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("j1", 10, "a"))
    store.put_hint(PriorityHint(**{**hint("x", 5, "a").model_dump(), "cluster": "other"}))
    store.put_hint(hint("j2", 20, "b"))
    store.remove_hint("c", "a", "j1")
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    base = ["hints", "--cluster", "c", "--redis-url", redis_url, "--follow", "--after", "0-0"]
    assert main([*base, "--json", "--count", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["type"], r["job_id"]) for r in rows] == [
        ("hint", "j1"),
        ("hint", "j2"),  # the other cluster's change is not shown
        ("hint_removed", "j1"),
    ]
    assert all(r["id"] for r in rows)
    assert main([*base[:-1], rows[1]["id"], "--vc", "a", "--count", "1"]) == 0
    assert "hint_removed  cluster=c vc=a job_id=j1" in capsys.readouterr().out
    assert main([*base[:-1], "yesterday", "--count", "1"]) == 2
    assert "not a stream id" in capsys.readouterr().err
    assert main(["hints", "--count", "2"]) == 2


def test_hints_names_the_known_clusters_for_an_unknown_one(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("j1", 7_200, "a"))
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "cc", "--redis-url", redis_url]) == 2
    err = capsys.readouterr().err
    assert "no hints, load or advice for cluster 'cc'" in err and "known clusters: c " in err


def test_hints_says_how_old_its_data_is_in_human_units(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("j1", 292_066, "a"))  # 81.1 GPU-hours, a duration of ~40.6 h
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    text = capsys.readouterr().out
    assert "newest hint " in text and " ago" in text and "never" not in text
    assert "expected service" in text and "81.1 GPU-h" in text and "~40.6 h" in text
    assert "292,066" not in text  # no raw seconds
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert 0 <= doc["newest_hint_age_s"] < 3600 and doc["load_age_s"] is None


def test_hints_on_an_empty_redis_says_so(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 1
    assert "no gpuhint data in Redis" in capsys.readouterr().out


def test_hints_shows_each_waiting_jobs_expected_start(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Like ``squeue --start``: the VC's forecast next to each job (JSON and table)."""
    from gpuhint.wire.contract import ExpectedStart, StartForecasts

    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    for job, prio in [("small", 30), ("big", 900)]:
        store.put_hint(hint(job, prio, "a"))
    t0 = 1_796_450_400.0  # 2026-12-05 06:00 UTC
    store.put_starts(
        StartForecasts(cluster="c", vc="a", time=t0 - 600,
                       jobs=(ExpectedStart(job_id="small", expected=t0, low=t0 - 3600,
                                           high=t0 + 7200),))
    )  # fmt: skip
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]) == 0
    rows = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)["queues"]["a"]}
    assert rows["small"]["expected_start"] == t0 and rows["small"]["expected_start_high"] > t0
    assert "expected_start" not in rows["big"]  # beyond the forecast: no opinion
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    text = capsys.readouterr().out
    assert "expected start, UTC (80%)" in text and "12-05 06:00 (05:00-08:00)" in text
