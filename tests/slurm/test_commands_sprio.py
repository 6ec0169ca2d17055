"""How the SiteFactor applier reads Slurm's queue (``squeue`` + ``sprio``), on canned output."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuhint.slurm.commands import SlurmCli


class _Cli(SlurmCli):
    def __init__(self, squeue: str, sprio: str) -> None:
        super().__init__()
        self.out = {"squeue": squeue, "sprio": sprio}

    def run(self, argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
        return self.out[argv[0]]


def test_job_pending_in_two_partitions_is_not_taken_for_pinned() -> None:
    """sprio prints a pending job once per partition it may run in; with partitions of
    different PriorityJobFactor the weighted partition factor differs per row. The job's
    priority matches one of them: it is not pinned (the last row alone does not match)."""
    squeue = "7|7|1500|(null)\n8|8|9999|(null)\n"
    sprio = (  # %i|%A|%B|%F|%J|%P|%Q|%S|%T|%N
        "7|500|0|0|0|1000|0|0||0\n"
        "7|500|0|0|0|0|0|0||0\n"
        "8|500|0|0|0|1000|0|0||0\n"
        "8|500|0|0|0|0|0|0||0\n"
    )
    jobs = {j.job_id: j for j in _Cli(squeue, sprio).pending_jobs()}
    assert not jobs["7"].pinned and jobs["7"].site_factor == 0
    assert jobs["8"].pinned  # an admin's Priority=9999 matches no partition's sum


def test_a_comment_that_is_not_utf8_does_not_stop_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm stores a job's comment and name as the bytes it was given (``sbatch
    --comment`` from a Latin-1 terminal); one such job must not make every pass fail."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_bytes(
        b"#!/bin/sh\nprintf '7|7|100|caf\\351 au lait\\n8|8|100|(null)\\n'\n"
    )
    (bin_dir / "sprio").write_bytes(b"#!/bin/sh\nprintf '7|1|0|0|0|0|0|99||0\\n'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    jobs = {j.job_id: j for j in SlurmCli().pending_jobs()}
    assert sorted(jobs) == ["7", "8"] and jobs["8"].comment == ""
    assert jobs["7"].comment and jobs["7"].comment.startswith("caf")  # a user's: kept
