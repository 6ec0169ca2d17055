"""The chunked reader gives exactly what gpuhint's trace readers give, for every format."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import pytest

from gpuhint.lab.analysis.reader import read_frame
from gpuhint.lab.traces.readers import TraceError, read_trace

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
EXCERPTS = [
    ROOT / "gpuhint" / "data" / "venus_sept_2vc.csv",  # helios
    DATA / "philly_excerpt.json",  # philly
    DATA / "itp_cluster01_400.csv",  # plain
]


@pytest.mark.parametrize("path", EXCERPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [7, 100_000])
def test_same_jobs_as_read_trace(path: Path, chunk: int) -> None:
    want = read_trace(path)
    seen: list[tuple[int, int]] = []
    got = read_frame(
        path, chunk_rows=chunk, tail_jobs=50, progress=lambda d, t: seen.append((d, t))
    )
    assert got.fmt == want.fmt
    df = got.jobs
    assert len(df) == len(want.jobs)
    for row, j in zip(df.itertuples(index=False), want.jobs, strict=True):
        assert row.submit == j.submit_time
        assert row.duration == j.duration
        assert row.gpus == j.num_gpus
        assert row.state == j.state.value
        assert row.vc == j.vc
        assert (row.user if isinstance(row.user, str) else None) == j.user
        if j.start_time is None:
            assert math.isnan(row.start)
        else:
            assert row.start == j.start_time
    assert got.tail == want.jobs[-50:]
    assert seen[-1][0] == seen[-1][1] == path.stat().st_size
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))


def test_gzip_and_unsorted_file(tmp_path: Path) -> None:
    lines = (ROOT / "gpuhint" / "data" / "venus_sept_2vc.csv").read_text().splitlines()
    header, rows = lines[0], lines[1:]
    p = tmp_path / "shuffled.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("\n".join([header, *reversed(rows)]) + "\n")
    want = read_trace(p)
    got = read_frame(p, chunk_rows=100, tail_jobs=30)
    assert list(got.jobs["submit"]) == [j.submit_time for j in want.jobs]
    # the tail is the latest jobs by submit time, not the last lines of the file
    assert [j.job_id for j in got.tail] == [j.job_id for j in want.jobs[-30:]]


def test_bad_row_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nb,5,-3,1\nc,9,1,2\n")
    with pytest.raises(TraceError, match=r"bad\.csv:3: duration must be a finite non-negative"):
        read_frame(p)
    got = read_frame(p, on_error="skip")
    assert len(got.jobs) == 2
    assert [e.line for e in got.errors] == [3]


def test_extra_field_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "wide.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1,9\n")
    with pytest.raises(TraceError, match=r"wide\.csv:2: 5 fields where the header has 4"):
        read_frame(p)


def _rows_of(frame) -> list[tuple]:  # type: ignore[no-untyped-def,type-arg]
    return list(frame.jobs.astype(object).where(frame.jobs.notna(), None).itertuples(index=False))


@pytest.mark.parametrize("path", EXCERPTS[::2], ids=lambda p: p.name)  # the CSV ones
def test_parallel_read_is_the_sequential_read(path: Path, tmp_path: Path) -> None:
    from gpuhint.lab.analysis.reader import _split_lines

    parts = _split_lines(path, 8)
    assert parts is not None and len(parts) == 8  # it is cut, into whole lines
    seq = read_frame(path, tail_jobs=40, workers=1)
    par = read_frame(path, tail_jobs=40, workers=2, parallel_min_bytes=0, chunk_rows=50)
    assert _rows_of(par) == _rows_of(seq)
    assert par.tail == seq.tail


def test_parallel_read_reports_bad_rows_in_file_order(tmp_path: Path) -> None:
    rows = [f"j{i},{i},{10 + i},1" for i in range(2000)]
    rows[1500] = "bad1,1500,-1,1"
    rows[1800] = "bad2,1800,x,1"
    p = tmp_path / "big.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows) + "\n")
    kw = {"workers": 2, "parallel_min_bytes": 0}
    with pytest.raises(TraceError, match=r"big\.csv:1502: duration must be"):
        read_frame(p, **kw)  # type: ignore[arg-type]
    got = read_frame(p, on_error="skip", **kw)  # type: ignore[arg-type]
    assert [e.line for e in got.errors] == [1502, 1802]
    assert len(got.jobs) == 1998
    assert list(got.jobs["line"])[:3] == [2, 3, 4]


def test_quoted_or_gzipped_csv_is_read_in_one_process(tmp_path: Path) -> None:
    from gpuhint.lab.analysis.reader import _split_lines

    p = tmp_path / "q.csv"
    p.write_text('job_id,submission_time,duration,num_gpu\n"a",0,1,1\nb,1,1,1\n')
    assert _split_lines(p, 4) is None
    g = tmp_path / "g.csv.gz"
    with gzip.open(g, "wt") as fh:
        fh.write("job_id,submission_time,duration,num_gpu\nb,1,1,1\n")
    assert _split_lines(g, 4) is None
    assert len(read_frame(p, workers=2, parallel_min_bytes=0).jobs) == 2


def test_a_field_past_the_csv_limit_is_a_trace_error(tmp_path: Path) -> None:
    """An unclosed quote swallowing the rest of the file (or a line of 128 KiB and more):
    a TraceError naming the line, not _csv.Error; in one process or in parallel."""
    head = "job_id,submission_time,duration,num_gpu\n1,10,100,1\n"
    quoted = tmp_path / "quote.csv"
    quoted.write_text(head + '2,20,"50,2\n' + "3,30,40,1\n" * 20_000)
    with pytest.raises(TraceError, match=r"quote.csv:3: .*field larger than field limit"):
        read_frame(quoted)
    long_line = tmp_path / "long.csv"
    long_line.write_text(head + "2,20,50," + "9" * 200_000 + "\n" + "3,30,40,1\n" * 2_000)
    for workers in (1, 2):
        with pytest.raises(TraceError, match=r"long.csv:3: .*field larger than field limit"):
            read_frame(long_line, on_error="skip", workers=workers, parallel_min_bytes=1)
