"""The /metrics server outlives clients that misbehave."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from gpuhint.metrics.server import MetricsServer


def test_a_client_that_never_sends_its_request_is_dropped() -> None:
    """A scraper that vanished mid-request (or a half-open connection) must not hold a
    serving thread forever: each one costs a thread, and they pile up."""
    reg = CollectorRegistry()
    Counter("demo_things", "Things.", registry=reg).inc()
    srv = MetricsServer(reg, host="127.0.0.1", port=0, request_timeout_s=0.5).start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as silent:
            silent.settimeout(5)
            t0 = time.monotonic()
            assert silent.recv(100) == b""  # closed by the server
            assert time.monotonic() - t0 < 4
        body = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=5).read()
        assert b"demo_things_total 1.0" in body
    finally:
        srv.stop()


def test_an_ipv6_address_can_be_bound() -> None:
    """GPUHINT_METRICS_HOST=:: (an IPv6-only pod network) or ::1."""
    if not socket.has_ipv6:
        pytest.skip("Python built without IPv6")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 on this host: nothing to check")  # a skip, not a silent pass
    srv = MetricsServer(CollectorRegistry(), host="::1", port=0).start()
    try:
        body = urllib.request.urlopen(f"http://[::1]:{srv.port}/livez", timeout=5).read()
        assert body == b"alive\n"
    finally:
        srv.stop()
