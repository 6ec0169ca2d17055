"""The plumbing of the local test servers: free ports, waiting for one, throw-away TLS
certificates, and a child process with its own directory and log, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Self


class ServiceError(RuntimeError):
    """A service could not be started; the message says why and what to install."""


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000
_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = (int(x) for x in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32_768, 60_999
    return low, high


def free_port() -> int:
    """A loopback port that is free now, outside the kernel's ephemeral range.

    A port the kernel handed out by ``bind(0)`` is an ephemeral one: until the server binds
    it, any outgoing connection (a client, another test's broker) may take it, and the
    server then fails with "Address already in use". Below the ephemeral range no outgoing
    connection lands, and this process never hands the same port out twice.

    >>> 0 < free_port() < 65_536
    True
    """
    return free_ports(1)


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports, chosen as :func:`free_port` does."""
    low, _ = ephemeral_range()
    for _ in range(500):
        base = random.randint(_LOWEST_PORT, max(_LOWEST_PORT, low - n))
        block = range(base, base + n)
        if not _handed_out.intersection(block) and all(_bindable(p) for p in block):
            _handed_out.update(block)
            return base
    raise ServiceError(f"no {n} consecutive free ports on 127.0.0.1 below {low}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"process exited with code {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    raise ServiceError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


@dataclass(frozen=True)
class TestCerts:
    """A throw-away CA and a server certificate for 127.0.0.1/localhost (PEM and PKCS#12)."""

    ca: Path
    cert: Path
    key: Path
    p12: Path
    password: str


def make_test_certs(directory: Path) -> TestCerts:
    """Make a CA and a server certificate with ``openssl`` (valid two days)."""
    exe = shutil.which("openssl")
    if exe is None:
        raise ServiceError("openssl is required for TLS test servers (apt-get install -y openssl)")
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(8)
    ext = d / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
         "/CN=gpuhint-test-ca", "-keyout", "ca.key", "-out", "ca.pem"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-keyout", "server.key", "-out", "server.csr"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "server.pem"],
        ["pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile",
         "ca.pem", "-name", "server", "-out", "server.p12", "-passout", f"pass:{password}"],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run([exe, *step], cwd=d, capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"openssl {step[0]} failed: {done.stderr[-2000:]}")
    return TestCerts(d / "ca.pem", d / "server.pem", d / "server.key", d / "server.p12", password)


class LocalProcess:
    """A child process with a work directory and a log file, stopped on close."""

    name = "service"

    def __init__(self, workdir: Path | None = None) -> None:
        self._tmp = None if workdir else tempfile.mkdtemp(prefix=f"gpuhint-{self.name}-")
        self.workdir = Path(workdir or self._tmp or ".")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 30.0) -> None:
    """SIGTERM every process still running, then wait for each; SIGKILL what is still
    there after ``timeout_s`` (workers and agents started by tests and benchmarks)."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def kill_process(svc: LocalProcess) -> None:
    """SIGKILL a service (a crash); its ``start`` runs it again with the same ports and data."""
    if svc.proc is not None and svc.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(svc.proc.pid, signal.SIGKILL)
        svc.proc.wait(10)
