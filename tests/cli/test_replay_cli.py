"""``gpuhint replay`` end to end over the in-memory broker twin (no Kafka)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.publisher import MemoryTransport
from gpuhint.cli import main
from gpuhint.cli import replay as replay_cli

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> MemoryTransport:
    for name in [n for n in os.environ if n.upper().startswith("GPUHINT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUHINT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUHINT_KAFKA_RETRY_S", "0")
    t = MemoryTransport()
    monkeypatch.setattr(replay_cli, "_transport", lambda settings: t)
    return t


def test_resume_without_an_earlier_run_refuses_to_start_over(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume promises to continue; with no state of this replay (another cluster, trace
    or state directory than the run it means) it must not re-send every event."""
    assert main(["replay", str(TRACE), "--no-progress", "--resume"]) == 2
    assert broker.sent == 0
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "without --resume" in err


def test_a_run_that_never_reached_the_broker_can_be_resumed(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.down = True
    assert main(["replay", str(TRACE), "--no-progress"]) == 2
    assert "rerun with --resume" in capsys.readouterr().err
    broker.down = False
    assert main(["replay", str(TRACE), "--no-progress", "--resume"]) == 0
    assert broker.sent > 0
    assert main(["replay", str(TRACE), "--no-progress", "--resume"]) == 0  # all done already
    assert "replayed 0 events" in capsys.readouterr().err


def test_an_unwritable_state_directory_is_a_user_error(
    broker: MemoryTransport,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("GPUHINT_STATE_DIR", str(tmp_path / "file"))
    assert main(["replay", str(TRACE), "--no-progress"]) == 2
    assert "cannot write the replay state" in capsys.readouterr().err
    assert broker.sent == 0


def test_no_progress_bar_into_a_log_file(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    """stderr is not a terminal (a Kubernetes Job, systemd, a CI log): the bar's '\\r'
    redraws would pile up in the log as one endless line; the summary line stays."""
    assert main(["replay", str(TRACE)]) == 0
    err = capsys.readouterr().err
    assert "replay -> " not in err and "\r" not in err
    assert "replayed " in err


def test_a_run_without_resume_that_sends_nothing_keeps_the_earlier_state(
    broker: MemoryTransport,
) -> None:
    """The earlier run's count stays until this run's first acknowledgement, so a run
    started by mistake without --resume while Kafka is down costs nothing."""
    assert main(["replay", str(TRACE), "--no-progress"]) == 0
    sent = broker.sent
    broker.down = True
    assert main(["replay", str(TRACE), "--no-progress"]) == 2
    broker.down = False
    assert main(["replay", str(TRACE), "--no-progress", "--resume"]) == 0
    assert broker.sent == sent  # all had been sent: nothing again


def test_left_out_jobs_are_reported(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    """An sacct export's running and pending jobs are not replayed: the run says so."""
    sacct = Path(__file__).resolve().parents[1] / "data" / "slurm" / "sacct_parsable.txt"
    assert main(["replay", str(sacct), "--no-progress"]) == 0
    assert broker.sent == 6  # 2 finished jobs x 3 events
    err = capsys.readouterr().err
    assert "left out 2 jobs: pending or running (no history yet)" in err


def test_a_repeated_job_id_is_not_replayed(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The worker takes a second job with a seen id for a resend and drops it: replay
    names it as a bad row (file:line), or skips and counts it with --on-error skip."""
    p = tmp_path / "dups.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nb,5,10,1\na,20,10,1\n")
    assert main(["replay", str(p), "--no-progress"]) == 2 and broker.sent == 0
    assert "dups.csv:4: job id 'a' already at line 2" in capsys.readouterr().err
    assert main(["replay", str(p), "--no-progress", "--on-error", "skip"]) == 0
    assert broker.sent == 6 and f"skipped {p}:4: job id 'a'" in capsys.readouterr().err


def test_a_long_replay_into_a_log_file_says_how_far_it_got(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal the bar is off: a replay paced over hours said nothing until
    its end. Now a plain line every PROGRESS_LINE_S (0 here: every batch)."""
    monkeypatch.setattr(replay_cli, "PROGRESS_LINE_S", 0.0)
    assert main(["replay", str(TRACE)]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("replay: ")]
    total = broker.sent
    assert lines and lines[-1] == f"replay: {total:,} of {total:,} events acknowledged (100%)"
    assert "\r" not in err
    assert main(["replay", str(TRACE), "--no-progress"]) == 0  # asked for silence: none
    assert "replay: " not in capsys.readouterr().err


@pytest.mark.parametrize("until", ["2000-01-01 00:00:00", "3600", "nan"])
def test_an_until_that_leaves_nothing_to_send_is_refused(
    broker: MemoryTransport, capsys: pytest.CaptureFixture[str], until: str
) -> None:
    """--until before the trace's first event (another year, or seconds for a trace in
    dates): "replayed 0 events", exit 0, before: a silent no-op."""
    assert main(["replay", str(TRACE), "--no-progress", "--until", until]) == 2
    assert broker.sent == 0
    err = capsys.readouterr().err
    assert f"--until {until!r}" in err and "Traceback" not in err
