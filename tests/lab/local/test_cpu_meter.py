"""The CPU meter the pipeline benchmark reports with (Linux /proc)."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from gpuhint.lab.local.cpu_meter import CpuMeter, listening_pid, machine_cpu_s, process_cpu_s

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def burn(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_process_cpu_counts_this_process_work() -> None:
    before = process_cpu_s(os.getpid())
    burn(0.3)
    after = process_cpu_s(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.25  # clock ticks are 10 ms


def test_gone_process_reads_as_none() -> None:
    assert process_cpu_s(2**22 + 12345) is None


def test_machine_busy_never_exceeds_total() -> None:
    busy, total = machine_cpu_s()
    assert 0 < busy <= total


def test_listening_pid_finds_the_owner_of_a_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert listening_pid(s.getsockname()[1]) == os.getpid()
    with socket.socket() as s:  # bound, not listening
        s.bind(("127.0.0.1", 0))
        assert listening_pid(s.getsockname()[1]) is None


def test_meter_reports_cores_per_name_and_for_the_machine() -> None:
    meter = CpuMeter(lambda: {"me": [os.getpid()], "gone": [2**22 + 12345]})
    burn(0.3)
    used = meter.stop()
    assert used["me_cores"] * used["seconds"] >= 0.25
    assert used["gone_cores"] == 0.0
    # this process ran on the machine the whole time: the machine was at least as busy
    assert used["machine_busy_cores"] >= used["me_cores"] * 0.9
    assert used["machine_busy_cores"] <= (os.cpu_count() or 1) + 1e-9
