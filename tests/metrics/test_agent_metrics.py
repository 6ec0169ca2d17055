"""A running ``gpuhint agent`` (fake NVML) serves its GPUs under DCGM exporter names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.lab.local.metrics_docs import undocumented
from gpuhint.lab.local.scrape import get, samples, total, value, wait_ready
from gpuhint.lab.local.services import free_port
from gpuhint.metrics.agent import DCGM_NAMES, AgentCollector, agent_health, dcgm_exposition


@pytest.fixture
def agent_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = tmp_path / "agent.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1", GPUHINT_METRICS_HOST="127.0.0.1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gpuhint", "agent", "--nvml", "fake", "--scenario", "xid",
                "--node", "gpu-7", "--interval", "0.3", "--dry-run", "--metrics-port", str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text(errors="replace")[-2000:]


def test_running_agent_serves_dcgm_metrics(agent_url: tuple[str, Path]) -> None:
    base, log = agent_url
    assert "sampled" in wait_ready(base, 60, log)
    status, text = get(f"{base}/metrics")
    assert status == 200
    # dcgm-exporter's exact header for its energy counter: no _total suffix
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"  # how the Python parser names it
    first = samples(text)
    gpu0 = {"gpu": "0", "device": "nvidia0", "Hostname": "gpu-7"}
    labels = next(dict(lab) for (n, lab) in first if n == "DCGM_FI_DEV_GPU_UTIL")
    assert set(labels) == {"gpu", "UUID", "device", "Hostname"} and labels["UUID"]
    uuid0 = next(
        dict(lab)["UUID"]
        for (n, lab) in first
        if n == "DCGM_FI_DEV_GPU_UTIL" and dict(lab)["gpu"] == "0"
    )
    gpu0["UUID"] = uuid0
    assert 0 <= value(first, "DCGM_FI_DEV_GPU_UTIL", **gpu0) <= 100
    assert value(first, "DCGM_FI_DEV_POWER_USAGE", **gpu0) > 0
    used = value(first, "DCGM_FI_DEV_FB_USED", **gpu0)
    free = value(first, "DCGM_FI_DEV_FB_FREE", **gpu0)
    assert used >= 0 and free >= 0 and used + free > 1000  # MiB of a real-sized card
    assert len({dict(lab)["gpu"] for (n, lab) in first if n == "DCGM_FI_DEV_GPU_UTIL"}) == 8
    assert total(first, "DCGM_FI_DEV_XID_ERRORS") > 0  # the xid scenario: XID 13 and 48
    assert value(first, "gpuhint_agent_gpus", state="total") == 8

    e0 = value(first, energy, **gpu0)
    ticks0 = value(first, "gpuhint_agent_ticks_total")
    time.sleep(1.0)
    later = samples(get(f"{base}/metrics")[1])
    assert value(later, "gpuhint_agent_ticks_total") > ticks0
    assert value(later, energy, **gpu0) > e0  # a counter
    assert value(later, "gpuhint_agent_records_sent_total") > 0
    assert get(f"{base}/nope")[0] == 404
    assert not undocumented({n for n, _ in later}), "add them to docs/metrics.md"


def test_health_and_collector_in_process() -> None:
    t = MemoryTransport()
    agent = NodeAgent(
        nvml=FakeNvml("gpu-lost"), publisher=BufferedPublisher(t), cluster="c", node="n1"
    )
    reg = CollectorRegistry()
    reg.register(AgentCollector(agent))
    assert agent_health(agent) == (False, "starting: no sample yet")
    empty = samples(dcgm_exposition(reg).decode())
    assert not any(n in DCGM_NAMES for n, _ in empty)  # nothing sampled: no GPU series
    agent.start()
    agent.tick()
    ok, why = agent_health(agent)
    assert ok, why
    assert not agent_health(agent, now=agent.last_tick_at + 3 * agent.interval_s + 6)[0]
    got = samples(dcgm_exposition(reg).decode())
    gpus = {dict(lab)["gpu"] for n, lab in got if n == "DCGM_FI_DEV_GPU_UTIL"}
    assert len(gpus) == 7 and "2" not in gpus  # GPU 2 fell off the bus: no made-up values
    assert value(got, "gpuhint_agent_gpus", state="unhealthy") == 1
    assert value(got, "gpuhint_agent_rosters_sent_total") == 0  # no scheduler feed
    agent.close()


def test_taken_port_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from gpuhint.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(
            ["agent", "--nvml", "fake", "--dry-run", "--once", "--node", "n", "--metrics-port",
             str(port)]
        )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and f"cannot serve metrics on 0.0.0.0:{port}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_rosters_sent_are_counted() -> None:
    from gpuhint.cores.job_tracker import JobTracker, SchedulerFeed
    from gpuhint.slurm.jobs import parse_slurm

    snapshot = Path(__file__).resolve().parents[1] / "data" / "slurm" / "squeue_1.json"
    feed = SchedulerFeed("slurm", str(snapshot), parse_slurm, JobTracker(cluster="c"))
    agent = NodeAgent(
        nvml=None, publisher=BufferedPublisher(MemoryTransport()), cluster="c", node="n1",
        feeds=[feed],
    )  # fmt: skip
    reg = CollectorRegistry()
    reg.register(AgentCollector(agent))
    agent.start()
    agent.tick()
    got = samples(dcgm_exposition(reg).decode())
    assert value(got, "gpuhint_agent_rosters_sent_total") == 1
