from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from gpuhint.wire.contract import JobEvent, JobPhase
from models import checkpoint
from models.checkpoint import MAGIC, CheckpointError, dumps, load, loads, read_header, save
from models.registry import DEFAULT_MODEL, make_model


def _job(i: int) -> JobEvent:
    return JobEvent(
        phase=JobPhase.SUBMITTED, job_id=str(i), user="u", num_gpus=2, time=i, submit_time=i
    )


def test_save_load_round_trip_continues_identically(tmp_path: Path) -> None:
    m = make_model(DEFAULT_MODEL)
    for i in range(30):
        m.predict(_job(i))
        m.learn(_job(i), 100.0 + i)
    path = tmp_path / "sub" / "model.ckpt"
    save(m, path)
    restored = load(path, expect_model=DEFAULT_MODEL, expect_version=m.version)
    for i in range(30, 40):
        assert m.predict(_job(i)) == restored.predict(_job(i))
        m.learn(_job(i), 50.0)
        restored.learn(_job(i), 50.0)
    assert m.predict(_job(99)) == restored.predict(_job(99))
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["model.ckpt"]  # no temp left


def test_header_fields() -> None:
    m = make_model("history")
    h = read_header(dumps(m))
    assert h["format"] == checkpoint.FORMAT_VERSION
    assert (h["model"], h["model_version"]) == ("history", m.version)
    assert h["gpuhint_version"]


def test_refuses_foreign_file() -> None:
    with pytest.raises(CheckpointError, match="not a gpuhint model checkpoint"):
        loads(pickle.dumps(make_model("history")))


def test_refuses_unknown_format() -> None:
    blob = MAGIC + json.dumps({"format": 99, "model": "history"}).encode() + b"\n" + b"x"
    with pytest.raises(CheckpointError, match="unsupported checkpoint format 99"):
        loads(blob)


def test_refuses_other_model_or_version() -> None:
    blob = dumps(make_model("history"))
    with pytest.raises(CheckpointError, match="expected 'river_linear'"):
        loads(blob, expect_model="river_linear")
    with pytest.raises(CheckpointError, match="expected version '999'"):
        loads(blob, expect_version="999")


def test_refuses_corrupt_payload_and_header() -> None:
    blob = dumps(make_model("history"))
    with pytest.raises(CheckpointError, match="corrupt checkpoint payload"):
        loads(blob[:-10])
    with pytest.raises(CheckpointError, match="unreadable checkpoint header"):
        loads(MAGIC + b"{nope\n")
    with pytest.raises(CheckpointError, match="truncated"):
        loads(MAGIC + b'{"format": 1}')


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load(tmp_path / "absent.ckpt")
