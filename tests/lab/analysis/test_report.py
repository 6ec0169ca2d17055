"""The report's assembly: headline facts from the numbers, a page with nothing external."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuhint.lab.analysis import report
from gpuhint.lab.analysis.reader import read_frame

from .test_stats import TINY


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:  # type: ignore[type-arg]
    d = tmp_path_factory.mktemp("report")
    (d / "tiny.csv").write_text(TINY)
    frame = read_frame(d / "tiny.csv", tail_jobs=100)
    n = report.analyze(frame, report.Options(out_dir=d / "out", qssf=False))
    return n, d / "out"


def test_findings_in_plain_words(analysed) -> None:  # type: ignore[no-untyped-def]
    n, _ = analysed
    facts = report.findings(n)
    # hand-computed on the tiny trace (see test_stats)
    assert facts[0] == (
        "Half of the GPU jobs run under 5.8 min, yet the mean is 13.9 min: the 100.0% that "
        "end within an hour use 100.0% of the GPU time."
    )
    assert facts[1].startswith("50.0% of GPU jobs ask for one GPU; jobs of more than 8 GPUs")
    assert facts[2] == (
        "33.3% of GPU jobs end cancelled or failed, holding 24.6% of the GPU time (failed "
        "alone: 16.7% of the jobs, 0.6% of the time)."
    )
    assert (
        facts[3] == "GPU jobs wait 0 s at the median and 117 s on average; 0.0% wait over an hour."
    )
    assert facts[4] == "The top 10% of users (1 of 3) use 95.8% of the GPU time."
    assert facts[5].startswith("42.9% of jobs repeat")
    assert facts[6] == "Submissions peak at 10:00 and are fewest at 00:00 (trace timestamps)."
    assert len(facts) == 7  # QSSF was not run


def test_page_references_nothing_outside_itself(analysed) -> None:  # type: ignore[no-untyped-def]
    n, out = analysed
    html = report.render_html(n, out)
    assert "<script" not in html and "@import" not in html and "url(" not in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == len(n["figures"]) and all(
        s.startswith("data:image/png;base64,") for s in srcs
    )
    hrefs = re.findall(r"href=['\"]([^'\"]*)['\"]", html)
    assert hrefs and all(h.startswith("#") for h in hrefs)


def test_names_are_escaped(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(TINY.replace("bob", "<b>ob&"))
    n = report.analyze(read_frame(tmp_path / "t.csv"), report.Options(out_dir=tmp_path, qssf=False))
    html = report.render_html(n, tmp_path)
    assert "&lt;b&gt;ob&amp;" in html and "<b>ob&" not in html


def test_demand_title_follows_the_data() -> None:
    from gpuhint.lab.analysis.figures import demand_title

    rows = [
        {"gpus": "1", "jobs": 58, "job_share": 0.58, "gpu_time_share": 0.1},
        {"gpus": "9-16", "jobs": 42, "job_share": 0.42, "gpu_time_share": 0.9},
    ]
    assert demand_title({"buckets": rows}) == (
        "GPU demand: 58% of jobs ask for 1 GPU; jobs of 9-16 GPUs hold the most GPU time (90%)"
    )
    rows[0]["gpu_time_share"], rows[1]["gpu_time_share"] = 0.58, 0.42
    assert "those jobs hold the most GPU time (58%)" in demand_title({"buckets": rows})
    assert demand_title({"buckets": [{"gpus": "0", "jobs": 3}]}) == "GPU demand"


def test_every_stage_after_the_read_is_announced(tmp_path: Path) -> None:
    """Statistics and trace checks take seconds on a large trace (docs/analyze.md, 4.8 s
    on a million jobs): a stage line must say so, or the progress ticks have no step."""
    (tmp_path / "tiny.csv").write_text(TINY)
    frame = read_frame(tmp_path / "tiny.csv", tail_jobs=100)
    said: list[str] = []
    report.analyze(frame, report.Options(out_dir=tmp_path / "out", qssf=False), say=said.append)
    stages = [s for s in said if not s.startswith(" ")]
    assert stages[0].startswith("statistics"), said
    assert stages.index("drawing figures") == 1


def test_figures_of_an_earlier_run_in_the_same_folder_are_not_left_behind(
    tmp_path: Path,
) -> None:
    """Re-running into the same --out (the default folder is named after the trace) with
    --no-qssf or without --series must not leave the last run's figures as this one's."""
    (tmp_path / "tiny.csv").write_text(TINY)
    out = tmp_path / "out"
    out.mkdir()
    for old in ("qssf_jct_cdf.png", "ces_load.png", "time_limits.png"):
        (out / old).write_bytes(b"\x89PNG old")
    (out / "notes.png").write_bytes(b"the user's own file")
    frame = read_frame(tmp_path / "tiny.csv", tail_jobs=100)
    n = report.analyze(frame, report.Options(out_dir=out, qssf=False, ces_jobs=False))
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == set(n["figures"].values()) | {"notes.png"}


def test_a_trace_without_gpu_jobs_draws_without_warnings(tmp_path: Path) -> None:
    """No "No artists with labels found to put in legend" on the user's terminal."""
    import warnings

    (tmp_path / "cpu.csv").write_text(
        "job_id,submission_time,duration,num_gpu\n1,1000,60,0\n2,1100,5400,0\n3,1200,30,0\n"
    )
    frame = read_frame(tmp_path / "cpu.csv", tail_jobs=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        n = report.analyze(frame, report.Options(out_dir=tmp_path / "out", qssf=False))
    assert n["figures"]["duration"] == "duration_cdf.png"
