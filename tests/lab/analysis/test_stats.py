"""The characterization's numbers on a tiny trace, against values computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.lab.analysis import repetition, stats
from gpuhint.lab.analysis.reader import read_frame

# 7 jobs; 2020-09-07 is a Monday. Columns of a Helios cluster_log.csv.
TINY = """\
job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1,alice,vcA,1,,1,COMPLETED,2020-09-07 10:00:00,2020-09-07 10:00:00,,100,
2,alice,vcA,1,,1,COMPLETED,2020-09-07 11:00:00,2020-09-07 11:01:40,,300,
3,alice,vcA,1,,1,FAILED,2020-09-08 10:00:00,2020-09-08 10:00:00,,200,
4,bob,vcB,8,,1,CANCELLED,2020-09-08 12:00:00,2020-09-08 12:10:00,,1000,
5,bob,vcB,8,,1,COMPLETED,2020-09-09 12:00:00,2020-09-09 12:00:00,,3000,
6,carol,vcB,0,4,1,TIMEOUT,2020-09-09 13:00:00,2020-09-09 13:00:00,,50,
7,alice,vcA,2,,1,COMPLETED,2020-09-10 10:00:00,2020-09-10 10:00:00,,400,
"""
# GPU time (GPU-s): 100, 300, 200, 8000, 24000, 0, 800 -> 33,400 in all.
TOTAL_GT = 33400.0


@pytest.fixture(scope="module")
def df(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    p: Path = tmp_path_factory.mktemp("tiny") / "tiny.csv"
    p.write_text(TINY)
    return read_frame(p).jobs


def test_fields_and_overview(df) -> None:  # type: ignore[no-untyped-def]
    f = stats.fields_present(df)
    assert f == {
        "user": True,
        "name": False,
        "start_time": True,
        "state": True,
        "vc": True,
        "gpus": True,
        "absolute_time": True,
        "time_limit": False,
    }
    o = stats.overview(df)
    assert (o["jobs"], o["gpu_jobs"], o["cpu_jobs"], o["users"], o["vcs"]) == (7, 6, 1, 3, 2)
    assert o["gpu_hours"] == pytest.approx(TOTAL_GT / 3600)
    assert o["span_days"] == pytest.approx(3.0)


def test_durations(df) -> None:  # type: ignore[no-untyped-def]
    d = stats.duration_stats(df)
    # GPU jobs: 100, 200, 300, 400, 1000, 3000
    assert d["gpu"]["jobs"] == 6
    assert d["gpu"]["median_s"] == pytest.approx(350.0)
    assert d["gpu"]["mean_s"] == pytest.approx(5000 / 6)
    assert d["cpu"]["median_s"] == 50.0
    assert d["by_gpus"]["1"]["jobs"] == 3
    assert d["by_gpus"]["1"]["median_s"] == 200.0
    assert d["by_gpus"]["5-8"]["mean_s"] == 2000.0
    assert d["by_gpus"]["2-4"]["jobs"] == 1
    assert d["by_gpus"][">8"]["jobs"] == 0
    assert d["gpu_jobs_under_1h_share"] == 1.0


def test_demand(df) -> None:  # type: ignore[no-untyped-def]
    rows = {r["gpus"]: r for r in stats.demand_stats(df)["buckets"]}
    assert rows["1"]["jobs"] == 3
    assert rows["1"]["job_share"] == pytest.approx(3 / 7)
    assert rows["1"]["gpu_time_share"] == pytest.approx(600 / TOTAL_GT)
    assert rows["5-8"]["gpu_time_share"] == pytest.approx(32000 / TOTAL_GT)
    assert rows["0"]["jobs"] == 1 and rows["0"]["gpu_time_share"] == 0.0
    d = stats.demand_stats(df)
    assert d["gpu_jobs_mean_gpus"] == pytest.approx(21 / 6)
    assert d["gpu_jobs_median_gpus"] == 1.5
    assert d["single_gpu_job_share"] == pytest.approx(0.5)


def test_states(df) -> None:  # type: ignore[no-untyped-def]
    s = stats.state_stats(df)
    g = s["gpu"]
    assert g["by_count"]["completed"] == pytest.approx(4 / 6)
    assert g["by_count"]["cancelled"] == pytest.approx(1 / 6)
    assert g["by_count"]["failed"] == pytest.approx(1 / 6)
    assert g["by_gpu_time"]["completed"] == pytest.approx(25200 / TOTAL_GT)
    assert g["by_gpu_time"]["cancelled"] == pytest.approx(8000 / TOTAL_GT)
    assert g["by_gpu_time"]["failed"] == pytest.approx(200 / TOTAL_GT)
    # TIMEOUT counts as failed
    assert s["all"]["by_count"]["failed"] == pytest.approx(2 / 7)
    assert s["states"] == {"COMPLETED": 4, "FAILED": 1, "CANCELLED": 1, "TIMEOUT": 1}


def test_queue(df) -> None:  # type: ignore[no-untyped-def]
    q = stats.queue_stats(df)["gpu"]
    # waits of the GPU jobs: 0, 100, 0, 600, 0, 0
    assert q["mean_s"] == pytest.approx(700 / 6)
    assert q["median_s"] == 0.0
    assert q["zero_share"] == pytest.approx(4 / 6)
    assert q["over_1h_share"] == 0.0


def test_submissions(df) -> None:  # type: ignore[no-untyped-def]
    s = stats.submission_stats(df, absolute=True)
    want = [0] * 24
    want[10], want[11], want[12], want[13] = 3, 1, 2, 1
    assert s["by_hour"] == want
    assert s["by_weekday"] == {
        "Mon": 2,
        "Tue": 2,
        "Wed": 2,
        "Thu": 1,
        "Fri": 0,
        "Sat": 0,
        "Sun": 0,
    }
    assert s["peak_hour"] == 10
    rel = stats.submission_stats(df, absolute=False)
    assert rel["by_weekday"] is None
    # hours since the first submit (10:00): jobs 1, 3 and 7 at hour 0, job 2 at hour 1
    assert rel["by_hour"][:4] == [3, 1, 2, 1]


def test_users(df) -> None:  # type: ignore[no-untyped-def]
    u = stats.user_stats(df)
    assert u["users"] == 3
    # ceil(1% of 3) = ceil(10% of 3) = 1 user: bob, 32,000 of 33,400 GPU-s
    assert u["top"]["top_1pct"] == {"users": 1, "gpu_time_share": pytest.approx(32000 / TOTAL_GT)}
    assert u["top"]["top_10pct"]["users"] == 1
    assert [t["user"] for t in u["top_users"]] == ["bob", "alice", "carol"]
    x, y = stats.user_gpu_time_curve(df)
    assert list(x) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert list(y) == pytest.approx([0, 32000 / TOTAL_GT, 1, 1])


def test_history_rule_and_repetition(df) -> None:  # type: ignore[no-untyped-def]
    h = repetition.history_rule(df)
    # job 2: alice's 1-GPU history (100); job 3: (100+300)/2; job 5: bob's 1000;
    # job 7: no 2-GPU history, so alice's mean (100+300+200)/3
    assert list(h["predicted"].round(6).fillna(-1)) == [-1, 100, 200, -1, 1000, -1, 200]
    r = repetition.repetition_stats(df)
    assert r["same_user_same_gpus_prior_share"] == pytest.approx(3 / 7)
    assert r["jobs_scored"] == 4
    # errors: 2/3, 0, 2/3, 1/2 -> median 7/12
    assert r["median_ape"] == pytest.approx(7 / 12)
    # factors off: 3, 1, 3, 2 -> median 2.5
    assert r["median_factor"] == pytest.approx(2.5)
    assert r["within_2x_share"] == pytest.approx(2 / 4)
    # only alice has 3 scored jobs: median of 2/3, 0, 1/2
    assert r["users_scored"] == 1
    assert r["user_median_ape_median"] == pytest.approx(0.5)


def test_vcs(df) -> None:  # type: ignore[no-untyped-def]
    rows = stats.vc_stats(df, has_state=True, has_start=True)
    assert [r["vc"] for r in rows] == ["vcB", "vcA"]
    b, a = rows
    assert (b["jobs"], b["gpu_jobs"], b["users"]) == (3, 2, 2)
    assert b["completion_rate_gpu"] == 0.5
    assert b["mean_queue_gpu_s"] == 300.0
    assert a["completion_rate_gpu"] == 0.75
    assert a["mean_queue_gpu_s"] == 25.0
    assert a["gpu_time_share"] == pytest.approx(1400 / TOTAL_GT)


def test_helios_summary(df) -> None:  # type: ignore[no-untyped-def]
    s = stats.helios_summary(df, has_state=True, has_start=True)
    assert (s["job_num"], s["gpu_job_num"], s["cpu_job_num"]) == (7, 6, 1)
    assert s["avg_run_time_gpu"] == pytest.approx(5000 / 6)
    assert s["med_run_time_gpu"] == 350.0
    assert s["avg_gpu_num"] == pytest.approx(3.5)
    assert s["complete_rate"] == pytest.approx(4 / 7)
    assert s["fail_rate_cpu"] == 1.0
    assert s["complete_rate_gpu"] == pytest.approx(4 / 6)
    assert s["cancel_gpu_time"] == 8000.0
    none = stats.helios_summary(df, has_state=False, has_start=False)
    assert none["complete_rate_gpu"] is None and none["avg_que_time_gpu"] is None


def test_paper_anchors_ship_with_the_package() -> None:
    paper = stats.paper_clusters()
    assert set(paper) == {"Venus", "Earth", "Saturn", "Uranus", "total"}
    assert paper["Venus"]["med_run_time_gpu"] == 204.0
    assert paper["Saturn"]["complete_rate_gpu"] == 0.582


def test_paper_columns_are_the_trace_summary_columns(df) -> None:  # type: ignore[no-untyped-def]
    """Same names as a trace's own summary, so they sit side by side in the report."""
    own = stats.helios_summary(df, has_state=True, has_start=True)
    assert set(stats.paper_clusters()["Venus"]) == set(own)


def test_time_limits(tmp_path: Path) -> None:
    p = tmp_path / "limits.csv"
    p.write_text(
        "job_id,submission_time,duration,num_gpu,time_limit\n"
        "a,0,50,1,100\nb,10,100,2,100\nc,20,10,1,100\nd,30,30,1,\n"
    )
    df = read_frame(p).jobs
    assert stats.fields_present(df)["time_limit"]
    t = stats.time_limit_stats(df)
    # used shares 0.5, 1.0, 0.1 (d has no limit)
    assert t["jobs"] == 3
    assert t["median_used_share"] == 0.5
    assert t["under_half_share"] == pytest.approx(1 / 3)
    assert t["at_limit_share"] == pytest.approx(1 / 3)
    # reserved 1x100 + 2x100 + 1x100 GPU-s, unused 50 + 0 + 90
    assert t["unused_gpu_time_share"] == pytest.approx(140 / 400)
    assert t["median_limit_s"] == 100.0


def test_history_rule_learns_only_from_finished_jobs(tmp_path: Path) -> None:
    """Online, as the engine: a job still running at a submit teaches nothing yet."""
    p = tmp_path / "online.csv"
    head = TINY.splitlines()[0]
    rows = [
        "1,alice,v,1,,1,COMPLETED,0,0,,1000,",  # runs until t=1000
        "2,alice,v,1,,1,COMPLETED,10,10,,50,",  # at t=10 nothing has finished
        "3,alice,v,1,,1,COMPLETED,100,100,,20,",  # job 2 finished at 60
        "4,alice,v,1,,1,COMPLETED,1000,1000,,10,",  # job 1 ends at 1000: not yet
        "5,alice,v,2,,1,COMPLETED,2000,2000,,30,",  # no 2-GPU history: all of alice's
    ]
    p.write_text("\n".join([head, *rows]) + "\n")
    h = repetition.history_rule(read_frame(p).jobs)
    want = [-1, -1, 50, (50 + 20) / 2, (1000 + 50 + 20 + 10) / 4]
    assert list(h["predicted"].fillna(-1)) == pytest.approx(want)
    assert list(h["same_size_prior"]) == [False, True, True, True, False]
