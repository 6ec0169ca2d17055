"""``gpuhint agent`` CLI: bad config is one line and exit 2; --once --dry-run prints messages."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from gpuhint.cli import main
from gpuhint.wire.contract import GpuSample, JobEvent, JobRoster, NodeStatus, decode_message

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("GPUHINT_CONFIG", "GPUHINT_AGENT_INTERVAL_S", "GPUHINT_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(k, raising=False)


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(["agent", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuhint agent: error: ") and "\n" not in err, err
    assert "Traceback" not in err and needle in err, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--nvml", "fake", "--interval", "0"], "agent_interval_s"),
        (["--nvml", "fake", "--buffer-max", "1"], "agent_buffer_max"),
        (["--nvml", "fake", "--scenario", "nope"], "unknown scenario"),
        (["--scenario", "busy"], "--nvml fake"),
        (["--nvml", "fake", "--bootstrap", "no-port"], "HOST:PORT"),
        (["--nvml", "none"], "--slurm, --slurm-nodes or --kubernetes"),
        (["--nvml", "none", "--slurm-nodes", "/no/such.json"], "--slurm-nodes"),
        (["--nvml", "fake", "--slurm", "/no/such/file"], "neither a file"),
        (["--nvml", "fake", "--kubernetes", "cmd:no-such-kubectl-xyz get pods"], "not on PATH"),
        (["--nvml", "fake", "--busy-util", "101"], "--busy-util"),
        # each source flag lists its own choices (review, 2026-12-07)
        (["--nvml", "fake", "--slurm-nodes", "/no/nodes.json"], "known source (sinfo, cmd"),
        (["--nvml", "fake", "--kubernetes", "/no/pods.json"], "(kueue, kubectl, cmd:COMMAND)"),
        (["--nvml", "fake", "--config", "/no/such.toml"], "does not exist"),
        # review 2026-12-07: node names like the contract's; finite numbers only
        (["--nvml", "fake", "--once", "--dry-run", "--node", "gpu 01"], "node_name"),
        (["--nvml", "fake", "--once", "--dry-run", "--node", "a:b"], "node_name"),
        (["--nvml", "fake", "--once", "--dry-run", "--node", "n" * 129], "node_name"),
        (["--nvml", "fake", "--once", "--dry-run", "--flush-timeout", "nan"], "--flush-timeout"),
        (["--nvml", "fake", "--once", "--dry-run", "--flush-timeout", "inf"], "--flush-timeout"),
        (["--nvml", "fake", "--once", "--dry-run", "--busy-util", "nan"], "--busy-util"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    one_line_error(capsys, argv, needle)


def test_bad_env_and_toml(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUHINT_AGENT_INTERVAL_S", "soon")
    one_line_error(capsys, ["--nvml", "fake"], "agent_interval_s")
    monkeypatch.delenv("GPUHINT_AGENT_INTERVAL_S")
    toml = tmp_path / "g.toml"
    toml.write_text("agent_buffer_max = -5\n")
    one_line_error(capsys, ["--nvml", "fake", "--config", str(toml)], "agent_buffer_max")
    toml.write_text("agent_buffer_max = [\n")
    one_line_error(capsys, ["--nvml", "fake", "--config", str(toml)], "cannot read")


def test_real_nvml_missing_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        one_line_error(capsys, ["--once", "--dry-run"], "--nvml fake")
    else:  # a GPU host: the real path must work instead
        pynvml.nvmlShutdown()
        assert main(["agent", "--once", "--dry-run"]) == 0


def test_once_dry_run_prints_decodable_messages(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["agent", "--nvml", "fake", "--scenario", "gpu-lost", "--once", "--dry-run",
         "--cluster", "venus", "--node", "gpu01",
         "--slurm", str(DATA / "slurm" / "squeue_1.json")]
    )  # fmt: skip
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    msgs = [(x["topic"], x["key"], decode_message(x["message"])) for x in lines]
    on_topic = [m for t, _, m in msgs if t == "gpuhint.job-events"]
    samples = [m for t, k, m in msgs if t == "gpuhint.gpu-samples" and k == "venus/gpu01"]
    (status,) = [m for t, _, m in msgs if t == "gpuhint.node-status"]
    jobs, rosters = on_topic[:7], on_topic[7:]
    assert all(isinstance(j, JobEvent) for j in jobs)
    assert rosters and all(isinstance(r, JobRoster) for r in rosters)  # after the events
    assert len(samples) == 7 and all(isinstance(s, GpuSample) for s in samples)
    assert isinstance(status, NodeStatus) and not status.healthy and status.num_gpus == 8


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    out = capsys.readouterr().out
    for word in (
        "--nvml",
        "--scenario",
        "--dry-run",
        "--slurm",
        "--spill-dir",
        "SIGTERM",
        "GPUHINT_",
    ):
        assert word in out


def test_slurm_nodes_publish_every_node_status(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["agent", "--nvml", "none", "--once", "--dry-run", "--cluster", "venus",
         "--slurm-nodes", str(DATA / "slurm" / "sinfo_2205.json")]
    )  # fmt: skip
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    status = {x["key"]: decode_message(x["message"]) for x in lines}
    assert sorted(status) == ["venus/n1", "venus/n2", "venus/n3"]
    assert all(isinstance(s, NodeStatus) and s.num_gpus == 8 for s in status.values())
    assert status["venus/n1"].busy_gpus == 3  # type: ignore[union-attr]
    assert not status["venus/n3"].powered_on  # type: ignore[union-attr]


def test_a_host_name_that_is_no_node_name_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUHINT_NODE_NAME", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "bad host.example.org")
    one_line_error(capsys, ["--nvml", "fake", "--once", "--dry-run"], "--node or GPUHINT_NODE")
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01.example.org")
    assert main(["agent", "--nvml", "fake", "--once", "--dry-run"]) == 0
    assert '"key":"default/gpu01"' in capsys.readouterr().out


class _Killed(Exception):
    """What the process's own SIGTERM handler (here: the test's) does: end it."""


def _die(signum: int, frame: object) -> None:
    raise _Killed


def test_a_second_sigterm_during_the_exit_flush_spills_at_once(tmp_path: Path) -> None:
    from agents.fake_nvml import FakeNvml
    from agents.node_agent import NodeAgent
    from agents.publisher import BufferedPublisher, MemoryTransport
    from gpuhint.cli.agent import _run_until_stopped

    t = MemoryTransport()
    t.down = True  # Kafka away: the exit flush would wait --flush-timeout
    pub = BufferedPublisher(t, buffer_max=100, spill_dir=tmp_path)
    agent = NodeAgent(nvml=FakeNvml("steady"), publisher=pub, cluster="c", node="n")
    args = argparse.Namespace(once=True, flush_timeout=30.0)
    old = signal.signal(signal.SIGTERM, _die)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        t0 = time.monotonic()
        lost = _run_until_stopped(agent, args, None, logging.getLogger("test"))
        took = time.monotonic() - t0
        assert signal.getsignal(signal.SIGTERM) is _die  # handed back after the flush
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert lost == 0 and took < 10
    kept = [x for f in tmp_path.glob("seg-*.jsonl") for x in f.read_text().splitlines()]
    assert len(kept) == 9  # 8 GPU samples and the node status, on disk


def test_once_exits_1_when_its_records_only_reached_the_spill_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/agent.md: --once exits 1 if records could not be sent; with a spill dir it
    exited 0 with Kafka down (a connectivity check that always passed)."""
    argv = ["agent", "--nvml", "fake", "--once", "--interval", "1", "--flush-timeout", "0"]
    rc = main([*argv, "--bootstrap", "127.0.0.1:1", "--spill-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "9 record(s) could not be sent to 127.0.0.1:1" in err, err
    assert f"kept in {tmp_path}" in err and "Traceback" not in err
    assert list(tmp_path.glob("seg-*.jsonl"))


@pytest.mark.parametrize(
    ("scenario", "needle"),
    [
        ({"util": "abc"}, "'util'"),
        ({"util": []}, "'util'"),
        ({"util": [[]]}, "'util'"),
        ({"util": [50, "x"]}, "'util'"),
        ({"memory_total_mib": "big"}, "'memory_total_mib'"),
        ({"jitter": True}, "'jitter'"),
        ({"events": {"at_s": 0}}, "'events'"),
        ({"events": [{"at_s": "x", "gpu": 0, "lost": True}]}, "events[0]"),
        ({"events": [{"gpu": "0", "xid": 13}]}, "events[0]"),
        ({"events": [{"gpu": 0, "xid": "13"}]}, "events[0]"),
        ({"events": [{"gpu": 0, "field_error": {"temperature_c": "x"}}]}, "events[0]"),
        ({"events": [{"gpu": 0, "ecc": {"uncorrected": "x"}}]}, "events[0]"),
        ({"mig": {"0": [{"profile": "1g.10gb"}]}}, "'mig'"),
        ({"mig": [1]}, "'mig'"),
    ],
)
def test_a_bad_scenario_file_is_one_line_not_a_traceback_every_tick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: dict[str, object], needle: str
) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"gpus": 2, **scenario}))
    one_line_error(capsys, ["--nvml", "fake", "--scenario", str(f), "--once", "--dry-run"], needle)


def test_a_spill_dir_in_use_by_another_agent_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.publisher import BufferedPublisher, MemoryTransport

    running = BufferedPublisher(MemoryTransport(), buffer_max=10, spill_dir=tmp_path)
    argv = ["--nvml", "fake", "--once", "--dry-run", "--spill-dir", str(tmp_path)]
    one_line_error(capsys, argv, "in use by another agent")
    running.close(0)
