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


def test_hints_expected_service_is_gpus_times_expected_duration_when_the_rank_is_overridden(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fallen-back VC ranks by submit time and an overdue job by ~0: neither is a
    service, so the "expected service" column must not show them as GPU-hours."""
    from gpuhint.wire.contract import FeatureContribution

    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    base = hint("fifo", 1_796_450_400.0, "a").model_dump()
    for job, prio, why in [("fifo", 1_796_450_400.0, "fifo_guard:fallback"),
                           ("late", 1e-4, "wait_bound:overdue")]:  # fmt: skip
        store.put_hint(
            PriorityHint(**{**base, "job_id": job, "priority": prio,
                            "predicted_duration_s": 3_000.0, "expected_duration_s": 3_600.0,
                            "reasons": (FeatureContribution(feature=why, contribution=0),)})
        )  # fmt: skip
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    lines = {ln.split()[1]: ln for ln in capsys.readouterr().out.splitlines() if ". " in ln}
    for job in ("fifo", "late"):
        assert "2.0 GPU-h" in lines[job], lines[job]  # 2 GPUs x 1 h
    assert "GPU-s" not in lines["late"] and "499,014" not in lines["fifo"]


def _display_col(line: str, token: str) -> int:
    """The terminal column where ``token`` starts (wide East Asian characters take 2)."""
    import unicodedata

    head = line[: line.index(token)]
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in head)


def test_hints_columns_line_up_with_long_and_wide_job_ids(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    jobs = ["short", "ns-research/" + "very-long-workload-name-" * 3, "训练作业-七", "j9"]
    for i, job in enumerate(jobs):
        store.put_hint(hint(job, 100.0 + i, "a"))
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    text = capsys.readouterr().out
    rows = [ln for ln in text.splitlines() if ". " in ln and "GPU-" in ln]
    assert len(rows) == 4
    assert len({_display_col(ln, "GPU-") for ln in rows}) == 1, rows
    header = next(ln for ln in text.splitlines() if ln.lstrip().startswith("rank"))
    assert _display_col(header, "expected service") + 16 == _display_col(rows[0], "GPU-s") + 5


def test_hints_shows_a_spread_vc_as_the_one_queue_a_scheduler_runs(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``gpuhint replay --spread-vcs`` keeps sub-VCs ``vc~k`` (docs/architecture.md);
    their priorities are comparable and a scheduler runs them as one queue."""
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    for job, prio, vc in [("s0", 30, "default~0"), ("s1", 20, "default~1"),
                          ("b0", 900, "default~0"), ("m1", 60, "default~1")]:  # fmt: skip
        store.put_hint(hint(job, prio, vc))
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    base = ["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]
    for args in (base, [*base, "--vc", "default"]):
        assert main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert list(out["queues"]) == ["default"]
        assert [r["job_id"] for r in out["queues"]["default"]] == ["s1", "s0", "m1", "b0"]
        assert [r["rank"] for r in out["queues"]["default"]] == [1, 2, 3, 4]
        assert out["queue_lengths"] == {"default": 4}
    assert main([*base, "--top", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["job_id"] for r in out["queues"]["default"]] == ["s1", "s0"]
    assert out["queue_lengths"] == {"default": 4}


def test_hints_json_on_an_empty_redis_exits_as_the_table_does(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No data is 1 with --json too (0 would read as "hints, none waiting"; 2 is an error)."""
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # still one JSON object on stdout
    assert doc["queues"] == {} and doc["load"] is None and doc["advice"] is None
    assert "no gpuhint data in Redis" in captured.err
    assert main(["hints", "--cluster", "c", "--vc", "a", "--redis-url", redis_url]) == 1
    assert "no gpuhint data in Redis" in capsys.readouterr().out


def test_hints_a_mistyped_cluster_is_an_error_also_with_vc(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("j1", 7_200, "a"))
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    for fmt in ([], ["--json"]):
        assert main(["hints", "--cluster", "cc", "--vc", "a", "--redis-url", redis_url, *fmt]) == 2
        assert "known clusters: c " in capsys.readouterr().err
    # the right cluster, a VC with nothing waiting: an answer, not an error
    assert main(["hints", "--cluster", "c", "--vc", "b", "--redis-url", redis_url]) == 0
    assert "c/b: 0 pending" in capsys.readouterr().out


def test_hints_says_when_the_expected_starts_were_forecast(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A VC with no events keeps its last forecast: a start shown without its as-of time
    may lie in the past with nothing to say so (the Slurm comment carries asof=)."""
    import time

    from gpuhint.wire.contract import ExpectedStart, StartForecasts

    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("small", 30, "a"))
    asof = time.time() - 3 * 3600
    store.put_starts(
        StartForecasts(cluster="c", vc="a", time=asof,
                       jobs=(ExpectedStart(job_id="small", expected=asof + 600, low=asof,
                                           high=asof + 1200),))
    )  # fmt: skip
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["queues"]["a"][0]
    assert row["expected_start_asof"] == asof
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    assert "expected starts as of 3.0 h ago" in capsys.readouterr().out


def test_hints_an_expected_start_band_over_midnight_names_the_other_day(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "12-05 23:00 (22:00-01:30)" reads as a band that ends before it starts."""
    from gpuhint.wire.contract import ExpectedStart, StartForecasts

    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    for job, prio in [("small", 30), ("big", 900)]:
        store.put_hint(hint(job, prio, "a"))
    t0 = 1_796_511_600.0  # 2026-12-05 23:00 UTC
    store.put_starts(
        StartForecasts(cluster="c", vc="a", time=t0 - 7200,
                       jobs=(ExpectedStart(job_id="small", expected=t0, low=t0 - 3600,
                                           high=t0 + 9000),
                             ExpectedStart(job_id="big", expected=t0 + 600, low=t0,
                                           high=t0 + 1800)))
    )  # fmt: skip
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    assert main(["hints", "--cluster", "c", "--redis-url", redis_url]) == 0
    lines = {ln.split()[1]: ln for ln in capsys.readouterr().out.splitlines() if ". " in ln}
    assert "12-05 23:00 (12-05 22:00 - 12-06 01:30)" in lines["small"], lines["small"]
    assert "12-05 23:10 (23:00-23:30)" in lines["big"], lines["big"]
    assert len(lines["small"]) == len(lines["big"])  # the next column still lines up


def test_hints_skips_queue_members_left_behind_and_still_fills_top(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member whose hint expired, or whose id is now another VC's, stays in the queue
    until the sweep (5 min): it is not a waiting job, and never shows another VC's hint."""
    r = redis.Redis.from_url(redis_url)
    keys = RedisKeys(unique_prefix)
    store = RedisStore(r, keys)
    for job, prio in [("expired", 1), ("moved", 2), ("real1", 30), ("real2", 40)]:
        store.put_hint(hint(job, prio, "a"))
    store.flush()
    r.delete(keys.hint("c", "expired"), keys.hint("c", "moved"))  # their TTL ran out
    store.put_hint(hint("moved", 500, "b"))  # the id hinted again, in VC b
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    base = ["hints", "--cluster", "c", "--redis-url", redis_url, "--vc", "a"]
    assert main([*base, "--json", "--top", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)["queues"]["a"]
    got = [(r["job_id"], r["rank"], r["vc"]) for r in rows]
    assert got == [("real1", 1, "a"), ("real2", 2, "a")]
    assert main([*base, "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "real1" in text and "moved" not in text and "expired" not in text


def test_hints_follow_of_a_spread_vc_shows_its_sub_vcs_changes(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--vc default`` shows the one queue of ``default~k`` (above); following it shows
    their changes too."""
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(hint("s0", 30, "default~0"))
    store.put_hint(hint("o", 30, "defaultx"))
    store.put_hint(hint("s1", 20, "default~1"))
    for t in (1, 2):  # entries shown to every VC: the test stops, fixed or not
        load = ClusterLoad(cluster="c", time=t, total_nodes=4, active_nodes=3, used_nodes=2)
        store.put_load(load)
    store.flush()
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    base = ["hints", "--cluster", "c", "--redis-url", redis_url, "--follow", "--after", "0-0"]
    assert main([*base, "--vc", "default", "--json", "--count", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("job_id") for r in rows] == ["s0", "s1"]


def test_hints_follow_after_a_trimmed_id_says_changes_may_be_lost(
    redis_url: str,
    unique_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/redis-keys.md: an id older than the first entry kept means missed changes."""
    r = redis.Redis.from_url(redis_url)
    store = RedisStore(r, RedisKeys(unique_prefix))
    for job in ("j1", "j2", "j3"):
        store.put_hint(hint(job, 10, "a"))
    store.flush()
    stream = RedisKeys(unique_prefix).changes
    old = [i.decode() for i, _ in r.xrange(stream)]
    r.xtrim(stream, maxlen=1, approximate=False)  # what changes_maxlen does on a busy cluster
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    base = ["hints", "--cluster", "c", "--redis-url", redis_url, "--follow", "--count", "1"]
    assert main([*base, "--after", old[0]]) == 0
    captured = capsys.readouterr()
    assert "job_id=j3" in captured.out and "may be lost" in captured.err
    for oldest in ("0-0", "0"):  # from the oldest kept: nothing lost
        assert main([*base, "--after", oldest]) == 0
        assert "may be lost" not in capsys.readouterr().err
