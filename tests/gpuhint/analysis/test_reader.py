"""The chunked reader gives exactly what gpuhint's trace readers give, for every format."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import pytest

from gpuhint.analysis.reader import read_frame
from gpuhint.traces import TraceError, read_trace

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
