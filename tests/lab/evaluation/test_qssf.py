"""``gpuhint evaluate qssf`` on a real excerpt: keys, errors, online (no look-ahead) hints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import pytest

from gpuhint.cli import main
from gpuhint.lab.evaluation.qssf import (
    ClosedLoopRanker,
    band_stats,
    evaluate_qssf,
    predict_online,
    read_priorities,
    read_vc_config,
)
from gpuhint.lab.evaluation.qssf_inputs import InputError, sim_job
from gpuhint.lab.traces.readers import TraceJob
from models.simulator.easy import simulate_easy

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "venus_qssf_300.csv"
VCS = DATA / "venus_qssf_vc_config.csv"
PRIOS = DATA / "venus_qssf_300_lgb_priorities.csv"

POLICIES = {"fifo", "sjf", "srtf", "qssf-oracle", "qssf", "qssf-given"}
TOP_KEYS = {
    "policies",
    "jct_ratio_fifo_over_qssf",
    "jct_ratio_qssf_over_fifo",
    "jct_ratio_qssf_over_sjf",
    "loop",
    "hint_updates",
    "jct_ratio_qssf_over_oracle",
    "mae_log",
    "median_abs_pct_error",
    "vc_sizes",
}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    rc = main(["evaluate", "qssf", *argv, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)  # type: ignore[no-any-return]


def test_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "cdf.png"
    doc = run_json(
        capsys,
        "--trace",
        str(TRACE),
        "--vc-config",
        str(VCS),
        "--priorities",
        str(PRIOS),
        "--priority-times-gpus",
        "--plot",
        str(plot),
    )
    assert doc.keys() >= TOP_KEYS
    assert set(doc["policies"]) == POLICIES
    for name, pol in doc["policies"].items():
        assert {"avg_jct_s", "avg_queue_s", "p99_jct_s"} <= pol.keys(), name
        assert pol["avg_jct_s"] >= pol["avg_queue_s"] >= 0
        assert pol["jobs"] == 300
    assert doc["vc_sizes"] == {"vcvGl": 20, "vcvlY": 2}
    pols = doc["policies"]
    assert doc["jct_ratio_fifo_over_qssf"] == pytest.approx(
        pols["fifo"]["avg_jct_s"] / pols["qssf"]["avg_jct_s"]
    )
    assert doc["jct_ratio_qssf_over_oracle"] == pytest.approx(
        pols["qssf"]["avg_jct_s"] / pols["qssf-oracle"]["avg_jct_s"]
    )
    assert doc["jct_ratio_qssf_over_fifo"] == pytest.approx(1 / doc["jct_ratio_fifo_over_qssf"])
    assert doc["loop"] == "closed" and doc["hint_updates"] > 0
    assert doc["given_priorities"]["missing"] == 0
    assert doc["mae_log"] > 0 and doc["median_abs_pct_error"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_backfill_adds_rows_and_sizing_by_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = run_json(capsys, "--trace", str(TRACE), "--backfill", "--no-plot", "--target-load", "0.5")
    assert "fifo+backfill" in doc["policies"] and "srtf+backfill" not in doc["policies"]
    assert doc["plot"] is None
    assert set(doc["vc_sizing"].values()) == {"sized to load 0.5"}
    # the largest job of the excerpt (144 GPUs) must fit its VC
    assert doc["vc_sizes"]["vcvGl"] >= 18


def test_missing_priorities_are_counted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = PRIOS.read_text().splitlines()
    short = tmp_path / "p.csv"
    short.write_text("\n".join(lines[:-10]) + "\n")
    doc = run_json(
        capsys, "--trace", str(TRACE), "--vc-config", str(VCS), "--priorities", str(short),
        "--no-plot",
    )  # fmt: skip
    assert doc["given_priorities"]["missing"] == 10
    assert "ranked after" in doc["given_priorities"]["missing_treatment"]


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        ("job_id,priority\n1,5\n2,abc\n", 3, "not a number"),
        ("job_id,priority\n1,5\n1,6\n", 3, "listed twice"),
        ("id,prio\n1,5\n", 1, "header must name job_id and priority"),
        ("job_id,priority\n1,inf\n", 2, "finite"),
    ],
)
def test_bad_priorities_file_is_a_user_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, line: int, reason: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    rc = main(["evaluate", "qssf", "--trace", str(TRACE), "--priorities", str(bad), "--no-plot"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{bad}:{line}:" in err and reason in err
    assert "Traceback" not in err


def test_bad_vc_config_and_too_small_vc(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "vcs.csv"
    bad.write_text(",num\nvcvGl,twenty\n")
    assert main(["evaluate", "qssf", "--trace", str(TRACE), "--vc-config", str(bad)]) == 2
    assert f"{bad}:2: nodes must be a whole number" in capsys.readouterr().err
    small = tmp_path / "small.csv"
    small.write_text(",num\nvcvGl,4\nvcvlY,2\n")
    rc = main(["evaluate", "qssf", "--trace", str(TRACE), "--vc-config", str(small), "--no-plot"])
    err = capsys.readouterr().err
    assert rc == 2 and "could never run" in err and str(small) in err


def test_text_output_names_sizes_ratios_and_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "x.png"
    rc = main(
        ["evaluate", "qssf", "--trace", str(TRACE), "--vc-config", str(VCS), "--plot", str(plot)]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "vcvGl 20, vcvlY 2" in out
    assert "qssf-oracle" in out and "xoracle" in out
    assert str(plot.resolve()) in out and plot.exists()


def test_side_file_readers() -> None:
    assert read_vc_config(VCS) == {"vcvGl": 20, "vcvlY": 2}
    prios = read_priorities(PRIOS)
    assert len(prios) == 300 and all(p > 0 for p in prios.values())


def test_online_hints_never_look_ahead() -> None:
    # b is submitted before a finishes: the model knows nothing of this user yet.
    jobs = [
        TraceJob("a", submit_time=0, duration=100, num_gpus=2, user="u"),
        TraceJob("b", submit_time=50, duration=10, num_gpus=2, user="u"),
        TraceJob("c", submit_time=200, duration=10, num_gpus=2, user="u"),
    ]
    preds = predict_online(jobs, "history")
    prior = preds.predicted_duration[0]
    assert preds.predicted_duration[1] == prior  # a still running at 50
    assert preds.predicted_duration[2] == pytest.approx((100 + 10) / 2)  # both done by 200
    assert preds.priority[2] == pytest.approx(2 * 55)


def test_open_loop_keeps_the_artifact_way(capsys: pytest.CaptureFixture[str]) -> None:
    closed = run_json(capsys, "--trace", str(TRACE), "--vc-config", str(VCS), "--no-plot")
    opened = run_json(
        capsys, "--trace", str(TRACE), "--vc-config", str(VCS), "--no-plot", "--open-loop"
    )
    assert opened["loop"] == "open" and opened["hint_updates"] == 0
    assert closed["loop"] == "closed"
    for name in ("fifo", "sjf", "srtf", "qssf-oracle"):  # the model plays no part in these
        assert opened["policies"][name] == closed["policies"][name]


def test_closed_loop_learns_from_the_simulated_schedule() -> None:
    # One 8-GPU node. A sweep of three 8-GPU jobs arrives while a long job runs; its first
    # job, once it ends *in the simulated schedule* (not at the trace's times: the trace
    # has no start times), tells the hints that its siblings are short, so they overtake
    # the 8-GPU job "z" of another shape submitted before them.
    jobs = [
        TraceJob("long", submit_time=0, duration=1000, num_gpus=8, user="x"),
        TraceJob("s1", submit_time=10, duration=5, num_gpus=8, user="u"),
        TraceJob("z", submit_time=20, duration=4000, num_gpus=8, user="v"),
        TraceJob("s2", submit_time=30, duration=5, num_gpus=8, user="u"),
        TraceJob("s3", submit_time=31, duration=5, num_gpus=8, user="u"),
    ]
    # (without the starvation bound: "z" waits longer than FIFO would make it wait)
    rep = evaluate_qssf(
        jobs, model="history_mix", vc_nodes={"default": 1}, loop="closed", wait_bound=0
    )
    assert rep.loop == "closed" and rep.predictions.hint_updates > 0
    oracle = rep.policies["qssf-oracle"].summary.avg_jct_s
    assert rep.policies["qssf"].summary.avg_jct_s == pytest.approx(oracle)
    opened = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 1}, loop="open")
    assert opened.predictions.hint_updates == 0


# --- tails and band coverage --------------------------------------------------------------

# every key the JSON had before the tails: users' automation reads them
OLD_TOP_KEYS = {
    "trace", "format", "rows_skipped", "jobs", "jobs_simulated", "jobs_without_gpus",
    "vc_sizes", "vc_sizing", "target_load", "gpus_per_node", "model", "model_version",
    "mae_log", "median_abs_pct_error", "jobs_scored", "policies", "loop", "hint_updates",
    "jct_ratio_fifo_over_qssf", "jct_ratio_qssf_over_fifo", "jct_ratio_qssf_over_sjf",
    "jct_ratio_qssf_over_oracle", "given_priorities", "seconds", "plot",
}  # fmt: skip
OLD_POLICY_KEYS = {
    "description", "jobs", "avg_jct_s", "avg_queue_s", "p50_jct_s", "p95_jct_s",
    "p99_jct_s", "by_gpus",
}  # fmt: skip
TAIL_KEYS = {
    "max_wait_s",
    "p99_wait_s",
    "p99_bounded_slowdown",
    "share_jct_over_2x_fifo",
    "share_jct_over_10x_fifo",
}
BAND_KEYS = {"band_coverage", "band_jobs", "share_off_2x", "share_off_2x_expected"}


@pytest.mark.parametrize("extra", [[], ["--backfill", "--open-loop"]])
def test_json_adds_tails_and_band_and_keeps_every_old_key(
    capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    doc = run_json(
        capsys, "--trace", str(TRACE), "--vc-config", str(VCS), "--priorities", str(PRIOS),
        "--priority-times-gpus", "--no-plot", *extra,
    )  # fmt: skip
    assert doc.keys() >= OLD_TOP_KEYS | BAND_KEYS
    assert set(doc["policies"]) >= POLICIES
    for name, pol in doc["policies"].items():
        assert pol.keys() >= OLD_POLICY_KEYS | TAIL_KEYS, name
        assert pol["max_wait_s"] >= pol["p99_wait_s"] >= 0, name
        assert pol["p99_bounded_slowdown"] > 0, name
        assert 0 <= pol["share_jct_over_10x_fifo"] <= pol["share_jct_over_2x_fifo"] <= 1, name
    fifo = doc["policies"]["fifo"]
    assert fifo["share_jct_over_2x_fifo"] == 0 and fifo["share_jct_over_10x_fifo"] == 0
    assert doc["band_jobs"] == 300
    assert 0 < doc["band_coverage"] < 1
    assert 0 <= doc["share_off_2x"] <= 1 and 0 <= doc["share_off_2x_expected"] <= 1


def test_tails_are_per_job_against_fifo() -> None:
    # One 8-GPU node. FIFO: long 0..1000, then s1 (submitted 10) 1000..1005, z (20)
    # 1005..5005. The QSSF oracle runs s1 before z as well (smaller service): same order.
    # SJF is the same too. Tails by hand for FIFO: waits 0, 990, 985.
    jobs = [
        TraceJob("long", submit_time=0, duration=1000, num_gpus=8, user="x"),
        TraceJob("s1", submit_time=10, duration=5, num_gpus=8, user="u"),
        TraceJob("z", submit_time=20, duration=4000, num_gpus=8, user="v"),
    ]
    rep = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 1})
    fifo = rep.policies["fifo"]
    assert fifo.wait == [0, 990, 985]
    assert fifo.jct == [1000, 995, 4985]
    t = fifo.tails
    assert t is not None
    assert t.max_wait_s == 990
    assert t.p99_wait_s == pytest.approx(985 + 0.98 * 5)
    # bounded slowdowns 1, 995/60, 4985/4000: sorted 1, 1.246, 16.58
    bs = sorted([1.0, 995 / 60, 4985 / 4000])
    assert t.p99_bounded_slowdown == pytest.approx(bs[1] + 0.98 * (bs[2] - bs[1]))
    assert t.share_jct_over_2x_fifo == 0
    # SRTF preempts long for s1: s1's JCT is 5 + 1 s tick (995 under FIFO), long's grows
    # by s1's run and the checkpoint cost: nobody is over 2x their FIFO JCT.
    srtf = rep.policies["srtf"].tails
    assert srtf is not None and srtf.share_jct_over_2x_fifo == 0
    d = rep.as_dict()
    assert d["policies"]["fifo"]["max_wait_s"] == 990
    assert d["band_jobs"] == 3 and d["band_coverage"] is not None


def test_band_stats_by_hand() -> None:
    b = band_stats(
        true=[100, 10, 50, 0, 7],
        predicted=[90, 30, 50, 0.5, math.nan],  # the last job has no prediction
        expected=[120, 10, 200, 3, math.nan],
        p10=[50, 1, 60, math.nan, 1],  # the 4th job's hint has no band
        p90=[200, 5, 90, math.nan, 9],
    )
    assert b.jobs == 4 and b.band_jobs == 3
    assert b.band_coverage == pytest.approx(1 / 3)  # only 100 in [50, 200]
    # point forecast off 2x: 30 vs 10 only (0.5 vs 0 floors to 1 s vs 1 s)
    assert b.share_off_2x == pytest.approx(1 / 4)
    # expected off 2x: 200 vs 50 (4x), 3 vs 0 (3 s vs 1 s)
    assert b.share_off_2x_expected == pytest.approx(2 / 4)
    assert b.as_dict().keys() == BAND_KEYS
    none = band_stats([], [], [], [], [])
    assert math.isnan(none.band_coverage) and none.jobs == 0


def test_band_uses_the_hint_at_submit_not_later_updates() -> None:
    # Closed loop with hint updates: the band scored is the one of the hint written at
    # submit; the priorities the run ends with may differ.
    rep = evaluate_qssf(
        [
            TraceJob("long", submit_time=0, duration=1000, num_gpus=8, user="x"),
            TraceJob("s1", submit_time=10, duration=5, num_gpus=8, user="u"),
            TraceJob("z", submit_time=20, duration=4000, num_gpus=8, user="v"),
            TraceJob("s2", submit_time=30, duration=5, num_gpus=8, user="u"),
            TraceJob("s3", submit_time=31, duration=5, num_gpus=8, user="u"),
        ],
        model="history_mix",
        vc_nodes={"default": 1},
    )
    p = rep.predictions
    assert p.hint_updates > 0
    assert p.submit_priority != p.priority  # updates moved some priorities
    assert all(lo <= hi for lo, hi in zip(p.p10, p.p90, strict=True))
    assert rep.band is not None and rep.band.band_jobs == 5


# --- the starvation bound ----------------------------------------------------------------


def test_wait_bound_flag_keys_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--trace", str(TRACE), "--vc-config", str(VCS), "--no-plot")
    off = run_json(capsys, *common, "--wait-bound", "0")
    assert off["wait_bound"] == 0 and off["overdue"] == 0
    on = run_json(capsys, *common, "--wait-bound", "0.01")
    assert on["wait_bound"] == 0.01 and on["overdue"] > 0  # a limit far below FIFO's waits
    assert on.keys() >= OLD_TOP_KEYS | BAND_KEYS
    opened = run_json(capsys, *common, "--open-loop")
    assert opened["wait_bound"] is None  # the open loop has no hint updates
    assert main(["evaluate", "qssf", *common, "--wait-bound", "-1"]) == 2
    assert "--wait-bound" in capsys.readouterr().err


def test_wait_bound_default_comes_from_the_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUHINT_QSSF_WAIT_BOUND", "0.25")
    doc = run_json(capsys, "--trace", str(TRACE), "--vc-config", str(VCS), "--no-plot")
    assert doc["wait_bound"] == 0.25


# --- baselines with the users' requested time limits ----------------------------------------


def test_time_limits_add_sjf_limit_and_easy_backfill() -> None:
    rnd = __import__("random").Random(3)
    jobs = []
    t = 0.0
    for k in range(300):
        t += rnd.expovariate(1 / 60)
        d = rnd.choice([30.0, 300.0, 3000.0])
        jobs.append(
            TraceJob(
                f"j{k}", submit_time=t, duration=d, num_gpus=rnd.choice([1, 4, 8, 16]),
                user=f"u{k % 7}", time_limit_s=d * rnd.choice([1.0, 2.0, 10.0]),
            )
        )  # fmt: skip
    rep = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 4})
    pol = rep.policies
    assert {"sjf-limit", "fifo+easy", "qssf+easy"} <= set(pol)
    # EASY backfill with limits beats plain FIFO here; ranking by requested service too
    assert pol["fifo+easy"].summary.avg_jct_s < pol["fifo"].summary.avg_jct_s
    assert pol["sjf-limit"].summary.avg_jct_s < pol["fifo"].summary.avg_jct_s
    assert pol["fifo+easy"].tails is not None and pol["sjf-limit"].tails is not None
    # squeue --start's estimate from the limits, scored on the jobs it named, beside ours
    es = rep.expected_start
    assert es is not None and es["limit_jobs"] > 0
    assert es["limit_median_rel_error"] is not None
    assert es["median_rel_error_limit_jobs"] is not None
    assert es["exact_median_rel_error"] is not None  # any trace: the true durations
    no_limits = [TraceJob(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in jobs[:50]]
    plain = evaluate_qssf(no_limits, model="history_mix", vc_nodes={"default": 4})
    assert "sjf-limit" not in plain.policies and "fifo+easy" not in plain.policies
    assert "qssf+easy" not in plain.policies


def _repetitive_users(
    seed: int, n: int, gap_s: float, durations: list[float], gpus: list[int]
) -> list[TraceJob]:
    """Poisson arrivals; job k belongs to user k mod len(durations), who always asks for
    the same GPUs and runs about the same time (within 0.8x .. 1.25x)."""
    rnd = __import__("random").Random(seed)
    jobs = []
    t = 0.0
    for k in range(n):
        t += rnd.expovariate(1 / gap_s)
        user = k % len(durations)
        d = durations[user] * rnd.uniform(0.8, 1.25)
        jobs.append(TraceJob(f"j{k}", t, d, gpus[user], user=f"u{user}"))
    return jobs


@pytest.mark.parametrize("loop", ["closed", "open"])
def test_qssf_with_easy_backfill_on_its_own_p90_durations(loop: Literal["closed", "open"]) -> None:
    """No time limits needed: the hints order the queue and their p90 is each job's run
    time for the reservation; it runs with --backfill (and wherever limits exist)."""
    jobs = _repetitive_users(5, 300, 60.0, [30.0, 300.0, 3000.0, 600.0, 60.0], [1, 4, 8, 16, 2])
    rep = evaluate_qssf(
        jobs, model="history_mix", vc_nodes={"default": 4}, backfill=True, loop=loop
    )
    pol = rep.policies
    easy = pol["qssf+easy"]
    assert easy.spec.easy and easy.spec.run_times == "hint"
    assert easy.tails is not None and len(easy.jct) == len(jobs)
    # repetitive users: the hints rank and size jobs well enough to beat FIFO's backfill
    assert easy.summary.avg_jct_s < pol["fifo+backfill"].summary.avg_jct_s
    if loop == "closed":  # its own closed loop: the bound counts its promotions apart
        assert rep.overdue_easy is not None and rep.overdue_easy >= 0
    else:
        assert rep.overdue_easy is None


def test_the_bound_acts_in_the_closed_loop_easy_run() -> None:
    """In the closed loop qssf+easy has its own hints and starvation bound: a strict
    bound promotes waiting jobs there (the overdue one gets the reservation), and the
    longest wait stays about the unbounded run's (EASY guarantees no more: the run is
    chaotic, one promotion changes what the model learns)."""
    jobs = _repetitive_users(11, 400, 40.0, [60.0, 600.0, 6000.0, 300.0], [1, 4, 16, 8])
    runs = {
        b: evaluate_qssf(
            jobs, model="history_mix", vc_nodes={"default": 3}, backfill=True, wait_bound=b
        )
        for b in (0.0, 0.5)
    }
    assert runs[0.0].overdue_easy == 0
    assert runs[0.5].overdue_easy is not None and runs[0.5].overdue_easy > 0
    waits = {b: r.policies["qssf+easy"].tails for b, r in runs.items()}
    assert waits[0.0] is not None and waits[0.5] is not None
    assert waits[0.5].max_wait_s <= 1.1 * waits[0.0].max_wait_s


@pytest.mark.parametrize("loop", ["closed", "open"])
def test_qssf_under_easy_backfill_on_the_users_limits(loop: Literal["closed", "open"]) -> None:
    """What a Slurm site runs with gpuhint's priorities and its own backfill: the hints
    order the queue, the reservations assume the requested limits (not the hints' p90)."""
    jobs = [
        TraceJob(
            j.job_id, j.submit_time, j.duration, j.num_gpus, user=j.user,
            time_limit_s=None if k % 10 == 3 else 4.0 * j.duration,
        )
        for k, j in enumerate(
            _repetitive_users(7, 300, 60.0, [30.0, 300.0, 3000.0, 600.0], [1, 4, 8, 16])
        )
    ]  # fmt: skip
    rep = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 4}, loop=loop)
    mine = rep.policies["qssf+easy-limit"]
    assert mine.spec.easy and mine.spec.priority == "hint" and mine.spec.run_times == "limit"
    assert mine.tails is not None and len(mine.jct) == len(jobs)
    if loop == "open":  # exactly EASY on the hints at submit and the requested limits
        prio = rep.predictions.submit_priority
        sims = [sim_job(j) for j in jobs]
        largest = max(j.time_limit_s or 0.0 for j in jobs)
        out = simulate_easy(
            sims, 4, [p if math.isfinite(p) else math.inf for p in prio],
            [j.time_limit_s or largest for j in jobs],
        )  # fmt: skip
        assert mine.jct == pytest.approx([o.end - j.submit for o, j in zip(out, sims, strict=True)])
    # the run times matter here, in both loops: on the limits, not on the hints' p90s
    assert mine.jct != pytest.approx(rep.policies["qssf+easy"].jct)
    plain = evaluate_qssf(
        [TraceJob(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in jobs[:60]],
        model="history_mix", vc_nodes={"default": 4}, backfill=True, loop=loop,
    )  # fmt: skip
    assert "qssf+easy-limit" not in plain.policies and "qssf+easy" in plain.policies


def test_the_expected_duration_scored_is_the_hints_not_an_override_priority() -> None:
    """While a VC's FIFO guard has fallen back, the priority published is the submit
    time: ``share_off_2x_expected`` scores the hint's expected duration, not 1.7e9 / GPUs."""
    from gpuhint.lab.evaluation.qssf_online import OnlinePredictions, expected_at_submit
    from gpuhint.lab.evaluation.qssf_report import score_hints
    from gpuhint.wire.contract import ARRIVAL_ORDER_REASON, FeatureContribution, PriorityHint

    jobs = [TraceJob(k, submit_time=1.7e9, duration=3600, num_gpus=8, user="u") for k in "ab"]
    guard = (FeatureContribution(feature=ARRIVAL_ORDER_REASON, contribution=1.2),)
    hints = [
        PriorityHint(job_id="a", num_gpus=8, submit_time=1.7e9, predicted_duration_s=3600,
                     priority=8 * 3600.0, expected_duration_s=3600, model="m",
                     model_version="1", created_at=1.7e9),
        PriorityHint(job_id="b", num_gpus=8, submit_time=1.7e9, predicted_duration_s=3600,
                     priority=1.7e9, expected_duration_s=3600, model="m", model_version="1",
                     created_at=1.7e9, reasons=guard),
    ]  # fmt: skip
    preds = OnlinePredictions(
        priority=[h.priority for h in hints],
        predicted_duration=[3600.0, 3600.0],
        model="m",
        model_version="1",
        events=4,
        seconds=0.0,
        mae_log=None,
        median_abs_pct_error=None,
        scored=0,
        submit_priority=[h.priority for h in hints],
        submit_expected=[expected_at_submit(h) for h in hints],
    )
    assert score_hints(jobs, [0, 1], preds).share_off_2x_expected == 0.0


def test_median_abs_pct_error_is_over_every_scored_job_not_a_median_of_vc_medians() -> None:
    # closed loop, two VCs of very different sizes: the median is over all the jobs the
    # predictors scored (each at its hint's point forecast at submit), not the upper of
    # the VCs' two medians
    from gpuhint.lab.traces.readers import read_trace

    jobs = read_trace(TRACE).jobs
    rep = evaluate_qssf(jobs, model="history_mix", vc_nodes=read_vc_config(VCS))
    p = rep.predictions
    errs = sorted(
        abs(p.predicted_duration[k] - j.duration) / j.duration
        for k, j in enumerate(jobs)
        if j.num_gpus > 0 and j.duration > 0
    )
    assert len(rep.vc_sizes) == 2 and len(errs) == p.scored
    mid = len(errs) // 2
    want = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
    assert p.median_abs_pct_error == pytest.approx(want)
    assert rep.as_dict()["median_abs_pct_error"] == pytest.approx(want)


def test_a_trace_without_gpu_jobs_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Review, 2026-12-07: the error said ``trace: no job asks for a GPU``."""
    cpu = tmp_path / "cpu_only.csv"
    lines = TRACE.read_text().splitlines()
    head = lines[0].split(",")
    g = head.index("gpu_num")
    rows = [",".join("0" if i == g else v for i, v in enumerate(r.split(","))) for r in lines[1:]]
    cpu.write_text("\n".join([lines[0], *rows]) + "\n")
    rc = main(["evaluate", "qssf", "--trace", str(cpu), "--no-plot", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{cpu}: no job asks for a GPU" in err and "Traceback" not in err


@pytest.mark.parametrize("second_submit", [20.0, 200.0])  # while the first waits / after it
def test_a_repeated_job_id_is_a_clear_error_not_an_assert(second_submit: float) -> None:
    """Review, 2026-12-07: the closed loop's submit asserted the core returned a hint; a
    repeated id (a resend to the core) made an AssertionError, the open loop a NaN."""
    jobs = [
        TraceJob("a", submit_time=0, duration=100, num_gpus=2, user="u"),
        TraceJob("a", submit_time=second_submit, duration=10, num_gpus=2, user="u"),
    ]
    for loop in ("closed", "open"):
        with pytest.raises(InputError, match="job id 'a' appears twice"):
            evaluate_qssf(jobs, model="history", loop=loop)


def test_a_submit_the_core_takes_for_a_resend_is_a_clear_error() -> None:
    """The safety net behind the id check: no AssertionError (review, 2026-12-07)."""
    ranker = ClosedLoopRanker(
        [TraceJob("a", submit_time=0, duration=100, num_gpus=2, user="u")], "history"
    )
    ranker.submit(0, 0.0)
    ranker.start(0, 0.0)
    ranker.finish(0, 100.0)
    with pytest.raises(InputError, match="job 'a' submitted again"):
        ranker.submit(0, 200.0)


def test_a_plot_folder_that_is_missing_is_said_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Review, 2026-12-07: the error came after the simulations, their results lost."""
    plot = tmp_path / "nodir" / "cdf.png"
    assert main(["evaluate", "qssf", "--trace", str(TRACE), "--plot", str(plot)]) == 2
    err = capsys.readouterr().err
    assert f"cannot save plot {plot}: no such folder" in err and "reading" not in err


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_a_bad_wait_bound_is_one_line_before_the_trace_is_read(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """Review, 2026-12-07: it was checked after reading the trace (two lines, work wasted)."""
    argv = ["evaluate", "qssf", "--trace", str(TRACE), "--no-plot", "--wait-bound", value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--wait-bound must be" in err


def test_a_vc_of_absurd_size_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Review, 2026-12-07: a VC of 1,000,000,000 nodes (a typo) was a MemoryError traceback;
    a tiny --target-load sized one so."""
    big = tmp_path / "vcs.csv"
    big.write_text(",num\nvcvGl,1000000000\n")
    assert main(["evaluate", "qssf", "--trace", str(TRACE), "--vc-config", str(big)]) == 2
    assert f"{big}:2: nodes must be 0..100,000" in capsys.readouterr().err
    rc = main(["evaluate", "qssf", "--trace", str(TRACE), "--no-plot", "--target-load", "1e-12"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{TRACE}: VC 'vcvGl' sized to load 1e-12 needs" in err


@pytest.mark.parametrize("flag", ["--priorities", "--vc-config"])
def test_a_side_file_not_utf8_names_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    """Review, 2026-12-07: the codec's byte position, no line (as ``--series`` did)."""
    bad = tmp_path / "side.csv"
    bad.write_bytes(b"job_id,priority\n1,5\nvc\xe9,7\n")
    assert main(["evaluate", "qssf", "--trace", str(TRACE), flag, str(bad), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: not UTF-8 text" in err and "Traceback" not in err
