from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuhint.lab.traces.readers import TraceError, TraceJob, detect_format, job_events, read_trace
from gpuhint.wire.contract import JobPhase, JobState

HELIOS_HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_helios_rows_are_normalized(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "log.csv",
        HELIOS_HEADER
        + "2,u2,vcA,8,,1,COMPLETED,2020-09-01 00:10:00,,,600,\n"
        + "1,u1,vcA,1,4,1,FAILED,2020-09-01 00:00:00,2020-09-01 00:01:00,,60,60\n",
    )
    read = read_trace(p)
    assert read.fmt == "helios"
    first, second = read.jobs  # sorted by submit time
    assert first.job_id == "1" and first.state is JobState.FAILED
    assert first.num_cpus == 4 and first.start_time == first.submit_time + 60
    assert second.num_gpus == 8 and second.start_time is None and second.duration == 600
    assert second.service == 8 * 600


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("3,u,vc,eight,,1,COMPLETED,2020-09-01 00:00:00,,,10,", "gpu_num is not a number"),
        ("3,u,vc,1,,1,COMPLETED,yesterday,,,10,", "submit_time is not a time"),
        ("3,u,vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,-5,", "duration must be"),
        ("3,u,vc,1,,1,COMPLETED,,,,10,", "missing submit_time"),
        ("3,u,vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,10,,extra", "fields where the header"),
        (",u,vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,10,", "missing job_id"),
        # rows the wire contract refuses (review, 2026-12-07: they reached the hint core
        # and ended in a traceback)
        ("3,u,vc,70000,,1,COMPLETED,2020-09-01 00:00:00,,,10,", "num_gpus 70000: "),
        ("3,u,vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,40000000,", "duration_s 40000000.0"),
        ("3,u,vc,1,,1,COMPLETED,9999-01-01 00:00:00,,,10,", "submit_time 253370764800.0: "),
        ("3,u,vc,1,,1,COMPLETED,2099-12-31 23:59:00,,,120,", "end time (start + duration)"),
        ("3,u,vc A,1,,1,COMPLETED,2020-09-01 00:00:00,,,10,", "vc 'vc A': String should"),
        ("3," + "u" * 300 + ",vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,10,", "uuu...': String"),
    ],
)
def test_bad_helios_row_names_file_line_and_reason(tmp_path: Path, row: str, reason: str) -> None:
    good = "1,u,vc,1,,1,COMPLETED,2020-09-01 00:00:00,,,10,\n"
    p = write(tmp_path, "log.csv", HELIOS_HEADER + good + row + "\n" + good.replace("1,", "9,", 1))
    with pytest.raises(TraceError) as err:
        read_trace(p)
    assert err.value.line == 3
    assert str(err.value).startswith(f"{p}:3: ")
    assert reason in err.value.reason
    skipped = read_trace(p, on_error="skip")
    assert [j.job_id for j in skipped.jobs] == ["1", "9"]
    assert [e.line for e in skipped.errors] == [3]


def test_a_utf8_bom_before_the_header_is_read_past(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM: the header is still the header (review)."""
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbfjob_id,submission_time,duration,num_gpu\na,0,10,1\n")
    read = read_trace(p)
    assert read.fmt == "plain" and [j.job_id for j in read.jobs] == ["a"]


def test_plain_csv_and_gzip(tmp_path: Path) -> None:
    p = tmp_path / "itp.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("job_id,submission_time,duration,num_gpu\na,100,50,2\nb,10,5,1\n")
    read = read_trace(p)
    assert read.fmt == "plain"
    assert [j.job_id for j in read.jobs] == ["b", "a"]
    assert read.jobs[0].user is None and read.jobs[0].vc == "default"


def test_philly_json_reports_the_line_of_a_bad_record(tmp_path: Path) -> None:
    good = {
        "status": "Pass",
        "vc": "v1",
        "jobid": "app_1",
        "user": "u1",
        "submitted_time": "2017-10-01 00:00:00",
        "start_time": "2017-10-01 00:10:00",
        "end_time": "2017-10-01 01:10:00",
        "runtime_min": 60.0,
        "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
    }
    bad = dict(good, jobid="app_2", submitted_time=None)
    text = "[\n" + json.dumps(good) + ",\n" + json.dumps(bad) + "\n]\n"
    p = write(tmp_path, "jobs.json", text)
    with pytest.raises(TraceError) as err:
        read_trace(p)
    assert err.value.line == 3 and "submitted_time" in err.value.reason
    read = read_trace(p, on_error="skip")
    (job,) = read.jobs
    assert job.num_gpus == 2 and job.duration == 3600 and job.state is JobState.COMPLETED
    assert job.start_time is not None and job.line == 2


def test_philly_invalid_json_is_a_trace_error(tmp_path: Path) -> None:
    p = write(tmp_path, "jobs.json", '[\n{"jobid": "a",\n "oops" }\n]')
    with pytest.raises(TraceError) as err:
        read_trace(p)
    assert err.value.line == 3 and "invalid JSON" in err.value.reason


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown trace format"):
        detect_format(write(tmp_path, "x.csv", "a,b,c\n1,2,3\n"))
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "nope.csv")


def test_job_events_are_time_ordered_and_complete(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "t.csv",
        "job_id,submission_time,duration,num_gpu\na,0,100,1\nb,50,0,2\nc,50,10,4\n",
    )
    events = job_events(read_trace(p).jobs, cluster="c1")
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert len(events) == 9 and {e.cluster for e in events} == {"c1"}
    for job in "abc":
        phases = [e.phase for e in events if e.job_id == job]
        assert phases == [JobPhase.SUBMITTED, JobPhase.STARTED, JobPhase.FINISHED]
    fin_a = next(e for e in events if e.job_id == "a" and e.phase is JobPhase.FINISHED)
    assert fin_a.time == 100 and fin_a.duration_s == 100 and fin_a.state is JobState.COMPLETED


def test_optional_time_limit_column_in_helios_and_plain(tmp_path: Path) -> None:
    helios = write(
        tmp_path,
        "log.csv",
        HELIOS_HEADER.rstrip("\n")
        + ",time_limit\n"
        + "1,u,vc,1,,1,TIMEOUT,2020-09-01 00:00:00,,,3600,,3600\n"
        + "2,u,vc,1,,1,COMPLETED,2020-09-01 00:01:00,,,60,,\n",
    )
    a, b = read_trace(helios).jobs
    assert a.time_limit_s == 3600.0 and a.state is JobState.TIMEOUT
    assert b.time_limit_s is None
    plain = write(
        tmp_path, "p.csv", "job_id,submission_time,duration,num_gpu,time_limit\nx,0,5,1,7200\n"
    )
    (job,) = read_trace(plain).jobs
    assert job.time_limit_s == 7200.0
    submitted = job_events([job])[0]
    assert submitted.phase is JobPhase.SUBMITTED and submitted.time_limit_s == 7200.0
    # traces without the column read as before
    no_col = write(tmp_path, "q.csv", "job_id,submission_time,duration,num_gpu\nx,0,5,1\n")
    assert read_trace(no_col).jobs[0].time_limit_s is None


@pytest.mark.parametrize(("raw", "reason"), [("soon", "not a number"), ("0", "must be > 0")])
def test_bad_time_limit_names_file_line(tmp_path: Path, raw: str, reason: str) -> None:
    p = write(
        tmp_path, "p.csv", f"job_id,submission_time,duration,num_gpu,time_limit\nx,0,5,1,{raw}\n"
    )
    with pytest.raises(TraceError, match=rf"{p}:2: .*{reason}"):
        read_trace(p)


_NAN = float("nan")


@pytest.mark.parametrize(
    "job",
    [
        TraceJob("1", 0.0, 60.0, 1, user="\udc80"),  # a JSON escape of a lone surrogate
        TraceJob("1", 0.0, 60.0, 1, name="x\ud800"),
        TraceJob("1", 0.0, 60.0, 1, vc="v\udc80"),
        TraceJob("\udc80", 0.0, 60.0, 1),
        TraceJob("1", 0.0, 60.0, 1, user=["a"]),  # type: ignore[arg-type]  # JSON list
        TraceJob("1", 0.0, 60.0, 1, user=5),  # type: ignore[arg-type]  # JSON number
        TraceJob("1", 0.0, 60.0, 2.5),  # type: ignore[arg-type]
        TraceJob("1", 0.0, 60.0, 1, state="BOGUS"),  # type: ignore[arg-type]
        TraceJob("1", 0.0, 60.0, 1, start_time=_NAN),
        TraceJob("1", _NAN, 60.0, 1),
        TraceJob("1", 0.0, 60.0, 1, time_limit_s=_NAN),
        TraceJob("1", 0.0, 60.0, 1, vc="a\x85"),
        TraceJob("1", 0.0, 60.0, 10**30),
        TraceJob("1", 0.0, 0.0, 1, start_time=4_102_444_801.0),
        # and some the contract takes
        TraceJob("1", 0.0, 60.0, 1, vc="a\x1c", user="ünï", name="x" * 256),
        TraceJob("1", 100.0, 60.0, 1, start_time=50.0),
        TraceJob("1", 4_102_444_740.0, 60.0, 1),
        TraceJob("1", 0.0, 31_622_400.0, 0, time_limit_s=0.0),
    ],
)
def test_contract_error_agrees_with_the_contract(job: TraceJob) -> None:
    """A row is refused at read exactly when its events would be refused later (review,
    2026-12-07: the quick check let surrogates and non-strings through to a traceback)."""
    from pydantic import ValidationError

    from gpuhint.lab.traces.readers import contract_error

    try:
        job_events([job])
        accepted = True
    except ValidationError:
        accepted = False
    reason = contract_error(job)
    assert (reason is None) == accepted, reason
    if reason is not None and job.start_time is not None and job.start_time != job.start_time:
        assert reason.startswith("start_time nan")  # the column the user wrote


def test_the_first_bad_row_in_file_order_stops_the_read(tmp_path: Path) -> None:
    """A row the contract refuses (line 2) before a row that does not parse (line 3): the
    read stops at line 2, as analyze's does (review, 2026-12-07)."""
    p = write(
        tmp_path,
        "order.csv",
        "job_id,submission_time,duration,num_gpu\na,0,10,70000\nb,0,ten,1\nc,0,10,1\n",
    )
    with pytest.raises(TraceError) as err:
        read_trace(p)
    assert err.value.line == 2 and "num_gpus 70000" in err.value.reason
    skipped = read_trace(p, on_error="skip")
    assert [e.line for e in skipped.errors] == [2, 3] and [j.job_id for j in skipped.jobs] == ["c"]
