"""Odd and hostile trace files: each is a ``file:line: reason`` TraceError, never a
traceback, and no valid job is dropped without a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhint.lab.traces.readers import TraceError, read_trace

PHILLY_JOB = (
    '{"jobid": "%s", "submitted_time": "2017-10-01 00:00:00", "runtime_min": 5,'
    ' "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}'
)
SACCT_OK = (
    '{"job_id": 1, "state": {"current": ["COMPLETED"]},'
    ' "time": {"submission": 1700000000, "elapsed": 60}'
)


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("deep.json", "[" * 100_000, 1),  # not an array of job objects at all
        ("deep_job.json", "[\n" + PHILLY_JOB[:-1] % "a" + ', "x": ' + "[" * 100_000, 2),
        ("deep.sacct.json", '{"jobs": [\n' + "[" * 100_000, 2),
    ],
)
def test_deeply_nested_json_is_a_trace_error(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    """JSON nested past the decoder's recursion limit: a RecursionError traceback before."""
    p = tmp_path / name
    p.write_text(text)
    for on_error in ("stop", "skip"):
        with pytest.raises(TraceError, match=rf"{name}:{line}: .*nested too deeply"):
            read_trace(p, on_error=on_error)


def test_text_after_the_philly_array_is_refused(tmp_path: Path) -> None:
    """Two arrays in one file (two exports concatenated): the second array's jobs were
    dropped without a word."""
    p = tmp_path / "two.json"
    p.write_text(f"[{PHILLY_JOB % 'a'}]\n[{PHILLY_JOB % 'b'}]\n")
    with pytest.raises(TraceError, match=r"two.json:2: unexpected text after the JSON array"):
        read_trace(p)
    p.write_text(f"[{PHILLY_JOB % 'a'}]\n  \n")  # trailing whitespace is fine
    assert [j.job_id for j in read_trace(p).jobs] == ["a"]


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ('"time": "yesterday"', "time: expected an object"),
        ('"tres": "gres/gpu=2"', "tres: expected an object"),
        ('"association": "acct"', "association: expected an object"),
        ('"partition": ["gpu"]', "partition: expected a string"),
        ('"account": {"name": "a"}', "account: expected a string"),
    ],
)
def test_sacct_json_fields_of_the_wrong_type_are_bad_rows(
    tmp_path: Path, extra: str, reason: str
) -> None:
    """A field of the wrong JSON type: an AttributeError traceback before."""
    p = tmp_path / "odd.sacct.json"
    good = SACCT_OK + "}"
    times = '"time": {"submission": 1700000000, "elapsed": 60}'
    bad = SACCT_OK.replace(times, extra) if extra.startswith('"time"') else SACCT_OK + ", " + extra
    bad = bad.replace('"job_id": 1', '"job_id": 2') + "}"
    p.write_text('{"jobs": [\n' + good + ",\n" + bad + "\n]}")
    with pytest.raises(TraceError, match=rf"odd.sacct.json:3: {reason}"):
        read_trace(p)
    read = read_trace(p, on_error="skip")
    assert [j.job_id for j in read.jobs] == ["1"]
    assert [e.line for e in read.errors] == [3]


PLAIN = "job_id,submission_time,duration,num_gpu\n"
# a stray quote opens a field that swallows the rest of the file: past the csv module's
# field size limit (128 KiB) it raised _csv.Error, a traceback
UNCLOSED = PLAIN + "1,10,100,1\n" + '2,20,"50,2\n' + "3,30,40,1\n" * 20_000


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_field_past_the_csv_limit_is_a_trace_error(tmp_path: Path, on_error: str) -> None:
    p = tmp_path / "quote.csv"
    p.write_text(UNCLOSED)
    with pytest.raises(TraceError, match=r"quote.csv:3: .*field larger than field limit"):
        read_trace(p, on_error=on_error)  # type: ignore[arg-type]


def test_a_load_series_field_past_the_csv_limit_is_a_series_error() -> None:
    import io

    from gpuhint.lab.traces.loadseries import SeriesError, parse_series

    text = "time,active,total\n0,3,10\n" + '"600,4,10\n' + "1200,4,10\n" * 20_000
    for on_error in ("stop", "skip"):
        with pytest.raises(SeriesError, match=r"x.csv:3: .*field larger than field limit"):
            parse_series(io.StringIO(text), "x.csv", on_error=on_error)


@pytest.mark.parametrize(
    "header",
    [
        "job_id, submission_time, duration, num_gpu",  # spaces after the commas
        "JOB_ID,SUBMISSION_TIME,DURATION,NUM_GPU",
    ],
)
def test_header_names_match_as_the_format_was_detected(tmp_path: Path, header: str) -> None:
    """Detected as plain (names stripped, any case), then every row was "missing
    submission_time"."""
    from gpuhint.lab.analysis.reader import read_frame

    p = tmp_path / "jobs.csv"
    p.write_text(header + "\n1, 10, 100, 1\n2,20,50,2\n")
    read = read_trace(p)
    assert [(j.job_id, j.submit_time, j.num_gpus) for j in read.jobs] == [
        ("1", 10.0, 1),
        ("2", 20.0, 2),
    ]
    for workers in (1, 2):
        frame = read_frame(p, workers=workers, parallel_min_bytes=1)
        assert frame.jobs["gpus"].tolist() == [1, 2]


def test_a_header_without_the_format_columns_is_one_error(tmp_path: Path) -> None:
    """--format helios on a file without Helios columns: one line-1 error naming the
    columns, not "missing submit_time" on row 2 (or on every row with --on-error skip)."""
    p = tmp_path / "jobs.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\n1,10,100,1\n")
    for on_error in ("stop", "skip"):
        with pytest.raises(TraceError, match=r"jobs.csv:1: header lacks .*gpu_num.*submit_time"):
            read_trace(p, fmt="helios", on_error=on_error)


SLURM = Path(__file__).resolve().parents[2] / "data" / "slurm"


def test_sacct_jobs_without_history_are_counted(tmp_path: Path) -> None:
    """Running and pending jobs of an sacct export were left out without a word."""
    read = read_trace(SLURM / "sacct_parsable.txt")
    assert sorted(j.job_id for j in read.jobs) == ["2002", "2004"]
    assert read.left_out == {"pending or running (no history yet)": 2}  # 2001, 2003
    p = tmp_path / "x.sacct.json"
    p.write_text(
        '{"jobs": [\n'
        + SACCT_OK
        + "},\n"
        + '{"job_id": 2, "state": {"current": ["RUNNING"]}, "time": {"submission": 5}},\n'
        + '{"job_id": 3, "state": {"current": ["PENDING"]}, "array": {"job_id": 3,'
        + ' "task_id": {"set": false}, "task": "5-9"}}\n]}'
    )
    read = read_trace(p)
    assert [j.job_id for j in read.jobs] == ["1"]
    assert read.left_out == {"pending or running (no history yet)": 2}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ('"runtime_min": true', "no usable runtime_min"),  # was a job of 1 minute
        ('"detail": [{"ip": "m1", "gpus": {"gpu0": 1}}]', r"detail\[0\].gpus must be a list"),
        ('"detail": [{"ip": "m1", "gpus": 4}]', r"detail\[0\].gpus must be a list"),
        ('"jobid": ["a"]', "jobid must be a string or a number"),
    ],
)
def test_philly_fields_of_the_wrong_type_are_bad_rows(
    tmp_path: Path, change: str, reason: str
) -> None:
    """A value of the wrong JSON type was read as something else (``true`` minutes as 1,
    the keys of an object as GPUs, a list as the id "['a']")."""
    key = change.split(":")[0]
    fields = PHILLY_JOB % "b"
    start = fields.index(key)
    end = fields.index(', "', start) if key != '"detail"' else len(fields) - 1
    bad = fields[:start] + change + fields[end:]
    p = tmp_path / "odd.json"
    p.write_text("[\n" + PHILLY_JOB % "a" + ",\n" + bad + "\n]")
    with pytest.raises(TraceError, match=rf"odd.json:3: {reason}"):
        read_trace(p)


def test_sacct_end_before_start_is_a_bad_row(tmp_path: Path) -> None:
    """Without Elapsed the run time is End - Start: an End before the Start was a job of
    0 s (a clock or export error taken as data)."""
    p = tmp_path / "x.sacct"
    p.write_text(
        "JobID|Submit|State|Start|End\n"
        "1|2026-01-01T10:00:00|COMPLETED|2026-01-01T10:00:00|2026-01-01T11:00:00\n"
        "2|2026-01-01T10:00:00|COMPLETED|2026-01-01T10:00:00|2026-01-01T09:00:00\n"
    )
    with pytest.raises(TraceError, match=r"x.sacct:3: End .* is before Start"):
        read_trace(p)
    j = tmp_path / "x.sacct.json"
    j.write_text(
        '{"jobs": [\n{"job_id": 2, "state": {"current": ["COMPLETED"]},'
        ' "time": {"submission": 100, "start": 200, "end": 150}}\n]}'
    )
    with pytest.raises(TraceError, match=r"x.sacct.json:2: time.end .* is before time.start"):
        read_trace(j)


@pytest.mark.parametrize("fmt", ["plain", "philly", "sacct", "sacct-json"])
def test_a_repeated_job_id_is_a_bad_row_for_the_service(tmp_path: Path, fmt: str) -> None:
    """The service (and the simulations built on its core) take a second job with an id
    already seen for a producer's resend and drop it."""
    p = tmp_path / "dup"
    if fmt == "plain":
        p.write_text(PLAIN + "a,10,100,1\nb,20,50,2\na,30,40,1\n")
    elif fmt == "philly":
        p.write_text(f"[\n{PHILLY_JOB % 'a'},\n{PHILLY_JOB % 'b'},\n{PHILLY_JOB % 'a'}]")
    elif fmt == "sacct":
        row = "|2026-01-01T10:00:00|COMPLETED|01:00:00\n"
        p.write_text("JobID|Submit|State|Elapsed\n" + "a" + row + "b" + row + "a" + row)
    else:
        one, two = SACCT_OK + "}", SACCT_OK.replace('"job_id": 1', '"job_id": 2') + "}"
        p.write_text('{"jobs": [\n' + ",\n".join([one, two, one]) + "\n]}")
    kind: Any = fmt
    assert len(read_trace(p, kind).jobs) == 3  # as read for analysis: all of them
    with pytest.raises(TraceError, match=r"dup:4: job id '(a|1)' already at line 2"):
        read_trace(p, kind, unique_ids=True)
    read = read_trace(p, kind, on_error="skip", unique_ids=True)
    assert len(read.jobs) == 2 and [e.line for e in read.errors] == [4]
