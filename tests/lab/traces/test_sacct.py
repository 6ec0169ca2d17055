"""Slurm accounting exports as traces: a real sacct export, and bad rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhint.lab.traces.readers import TraceError, read_trace
from gpuhint.lab.traces.sacct import SACCT_FIELDS
from gpuhint.slurm.commands import SlurmCli
from gpuhint.wire.contract import JobState

HEADER = SACCT_FIELDS.replace(",", "|")


@pytest.mark.integration
def test_real_sacct_exports_read_as_traces(slurm_conf: str, tmp_path: Path) -> None:
    cli = SlurmCli(slurm_conf)
    sb = ["sbatch", "--parsable", "-o", "/dev/null", "-t", "5", "--account", "research"]
    ids = [cli.run([*sb, "-G", str(g), "--wrap", "sleep 1"]).strip() for g in (1, 4)]
    arr = cli.run([*sb, "-G", "2", "-a", "0-1", "--wrap", "srun true; sleep 1"]).strip()
    deadline = time.monotonic() + 90
    while cli.run(["squeue", "-h", "-j", ",".join([*ids, arr]), "-o", "%i"]).strip():
        assert time.monotonic() < deadline, "jobs did not finish"
        time.sleep(0.5)
    sel = ["-j", ",".join([*ids, arr])]
    want = {*ids, f"{arr}_0", f"{arr}_1"}
    while True:  # accounting lands in slurmdbd a moment after the jobs end
        doc = json.loads(cli.run(["sacct", "-a", "-X", "--json", *sel]))
        done = {
            f"{j['array']['job_id']}_{j['array']['task_id']}"
            if j["array"]["job_id"] and j["array"]["task_id"] is not None
            else str(j["job_id"])
            for j in doc["jobs"]
            if j["state"]["current"] == "COMPLETED"
        }
        if want <= done:
            break
        assert time.monotonic() < deadline, f"accounting has {sorted(done)}"
        time.sleep(0.5)
    parsable = tmp_path / "history.sacct"
    parsable.write_text(cli.run(["sacct", "-a", "--parsable2", f"--format={SACCT_FIELDS}", *sel]))
    assert ".batch" in parsable.read_text()  # steps are there (no -X) and must be folded
    as_json = tmp_path / "history.json"
    as_json.write_text(cli.run(["sacct", "-a", "--json", *sel]))
    for path, fmt in ((parsable, "sacct"), (as_json, "sacct-json")):
        read = read_trace(path)
        assert read.fmt == fmt
        got = {j.job_id: j for j in read.jobs}
        assert sorted(got) == sorted([*ids, f"{arr}_0", f"{arr}_1"]), fmt
        assert [got[i].num_gpus for i in ids] == [1, 4]
        assert got[f"{arr}_1"].num_gpus == 2
        assert {j.vc for j in read.jobs} == {"research"}
        assert {j.state for j in read.jobs} == {JobState.COMPLETED}
        assert all(0.5 <= j.duration <= 30 for j in read.jobs)
        assert {j.time_limit_s for j in read.jobs} == {300.0}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "gpuhint", "evaluate", "qssf", "--trace", str(as_json),
         "--json", "--no-plot"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jobs"] == 4


def test_bad_rows_name_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.sacct"
    p.write_text(
        f"{HEADER}\n"
        "1|a|u|acc|gpu|100|110|170|00:01:00|01:00:00|COMPLETED|gres/gpu=2||1\n"
        "2|a|u|acc|gpu|yesterday|110|170|00:01:00|01:00:00|COMPLETED|||1\n"
        "3|a|u|acc|gpu|100|110|170|00:01:00|COMPLETED|||1\n"
    )
    with pytest.raises(TraceError, match=r"bad.sacct:3: Submit: 'yesterday' is not a time"):
        read_trace(p)
    read = read_trace(p, on_error="skip")
    assert [j.job_id for j in read.jobs] == ["1"] and read.jobs[0].duration == 60.0
    assert [e.line for e in read.errors] == [3, 4] and "13 fields" in str(read.errors[1])
    j = tmp_path / "bad.json"
    j.write_text('{"jobs": [\n {"job_id": 1, "state": {"current": "WEIRD"}}\n]}')
    with pytest.raises(TraceError, match=r"bad.json:2: state: unknown Slurm state"):
        read_trace(j)
    j.write_text(
        '{"jobs": [\n {"job_id": 1, "state": {"current": "COMPLETED"},'
        ' "time": {"submission": "x"}}\n]}'
    )
    with pytest.raises(TraceError, match=r"bad.json:2: time.submission: not a number: 'x'"):
        read_trace(j)  # the field is named (review, 2026-12-07)
    j.write_text(
        '{"jobs": [\n {"job_id": 1, "state": {"current": "COMPLETED"}, "allocation_nodes":'
        ' 1e999, "time": {"submission": 5, "elapsed": 60}}\n]}'
    )
    with pytest.raises(TraceError, match=r"bad.json:2: allocation_nodes: not a finite number"):
        read_trace(j)  # not an OverflowError traceback
