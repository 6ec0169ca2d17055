"""``gpuhint evaluate qssf`` on a real excerpt: keys, errors, online (no look-ahead) hints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cli import main
from gpuhint.evaluation.qssf import (
    evaluate_qssf,
    predict_online,
    read_priorities,
    read_vc_config,
)
from gpuhint.traces import TraceJob

DATA = Path(__file__).resolve().parent.parent / "data"
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
    rep = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 1}, loop="closed")
    assert rep.loop == "closed" and rep.predictions.hint_updates > 0
    oracle = rep.policies["qssf-oracle"].summary.avg_jct_s
    assert rep.policies["qssf"].summary.avg_jct_s == pytest.approx(oracle)
    opened = evaluate_qssf(jobs, model="history_mix", vc_nodes={"default": 1}, loop="open")
    assert opened.predictions.hint_updates == 0
