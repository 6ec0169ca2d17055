"""``gpuhint demo``'s text as a person reads it: aligned columns, human units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuhint.cli import main


def _blocks(out: str) -> list[list[str]]:
    """The job lines under each "run first:" heading."""
    blocks: list[list[str]] = []
    for line in out.splitlines():
        if line.rstrip().endswith("run first:"):
            blocks.append([])
        elif blocks and line.lstrip().startswith("job "):
            blocks[-1].append(line)
    return [b for b in blocks if b]


def test_demo_queue_heads_stay_aligned_with_long_ids_and_read_in_human_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Philly's job ids (application_1506638472019_10309) are longer than the old column
    assert main(["demo", "--trace", "philly", "--no-progress"]) == 0
    blocks = _blocks(capsys.readouterr().out)
    assert blocks
    for block in blocks:
        cols = {line.index(" GPUs ") for line in block}
        assert len(cols) == 1, block  # the GPUs column lines up in each block
        for line in block:
            m = re.search(r"typical ~([\d,.]+) (s|min|h|d)\b", line)
            assert m, line
            value = float(m.group(1).replace(",", ""))
            assert m.group(2) != "min" or value < 120, line  # not "4,886.4 min"


def test_demo_schedule_queue_aligns_ids_of_different_lengths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "mixed.csv"
    rows = ["job_id,submission_time,duration,num_gpu"]
    for i in range(60):  # one 8-GPU node, 60 8-GPU jobs: a queue forms
        job = f"j{i}" if i % 2 else f"a_long_job_identifier_from_a_kueue_label_{i:03d}"
        rows.append(f"{job},{1000 + i * 10},{3600 + i * 60},8")
    trace.write_text("\n".join(rows) + "\n")
    cfg = tmp_path / "vc.csv"
    cfg.write_text("vc,nodes\ndefault,1\n")
    args = ["demo", "--trace", str(trace), "--vc-config", str(cfg), "--no-progress"]
    assert main(args) == 0
    blocks = _blocks(capsys.readouterr().out)
    assert blocks and any(len(b) > 1 for b in blocks)
    for block in blocks:
        assert len({line.index(" GPUs ") for line in block}) == 1, block


def test_demo_rows_describe_one_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    """The service shown is GPUs x the mean run the row names (what the priority ranks
    by), not GPUs x the point forecast beside a priority that means something else; a
    job moved to the front says so."""
    from gpuhint.cli.demo import _print_jobs
    from gpuhint.wire.contract import FeatureContribution, PriorityHint

    def hint(job: str, first: str | None) -> PriorityHint:
        reasons = [FeatureContribution(feature=first, contribution=1.0)] if first else []
        return PriorityHint(job_id=job, num_gpus=4, submit_time=0, predicted_duration_s=90,
                            priority=4 * 1800.0 if first is None else 1e-4,
                            duration_p10_s=30, duration_p90_s=240, model="m",
                            model_version="1", created_at=0, expected_duration_s=1800,
                            reasons=reasons)  # fmt: skip

    _print_jobs([("a", hint("a", None)), ("b", hint("b", "wait_bound:overdue"))])
    a, b = capsys.readouterr().out.splitlines()
    assert "expected service    2.0 GPU-h (mean run 30 min; typical ~90 s, 80%: 30 s-4 min)" in a
    assert a.endswith(")") and b.endswith("[first: waited past its limit]")
