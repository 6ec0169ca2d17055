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
            m = re.search(r"predicted\s+([\d,.]+) (s|min|h|d)\b", line)
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
