"""``/metrics`` (Prometheus text format) and ``/healthz`` served from a daemon thread.

>>> from prometheus_client import CollectorRegistry, Counter
>>> import urllib.request
>>> reg = CollectorRegistry()
>>> Counter("demo_things", "Things done.", registry=reg).inc(3)
>>> srv = MetricsServer(reg, health=lambda: (True, "ok"), host="127.0.0.1", port=0).start()
>>> body = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics").read().decode()
>>> "demo_things_total 3.0" in body
True
>>> urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/healthz").read()
b'ok\\n'
>>> srv.stop()
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]
"""Returns (ready, one line saying why)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # a burst of scrapers on a busy host is not turned away


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """Serves ``registry`` at ``/metrics`` and ``health()`` at ``/healthz`` (200 or 503)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        health: Health | None = None,
        host: str = "0.0.0.0",
        port: int = 9400,
        exposition: Callable[[CollectorRegistry], bytes] = generate_latest,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.registry = registry
        self.request_timeout_s = request_timeout_s  # a silent client loses its thread
        self.exposition = exposition
        self.health: Health = health or (lambda: (True, "ok"))
        self.host = host
        self.port = port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        """Bind (``port=0``: any free port, then ``self.port`` is the one bound) and serve.

        Raises ``OSError`` when the port cannot be bound.
        """
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = self.request_timeout_s

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    try:
                        body, status = server.exposition(server.registry), 200
                    except Exception as exc:  # a collector bug: say so, keep serving
                        log.exception("metrics collection failed")
                        body, status = f"collection failed: {exc}\n".encode(), 500
                    self._reply(status, body, CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    try:
                        ok, why = server.health()
                    except Exception as exc:
                        ok, why = False, f"health check failed: {type(exc).__name__}: {exc}"
                    self._reply(200 if ok else 503, f"{why}\n".encode(), "text/plain")
                elif path == "/livez":
                    self._reply(200, b"alive\n", "text/plain")
                else:
                    self._reply(404, b"try /metrics, /healthz or /livez\n", "text/plain")

            def _reply(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("metrics http: " + format, *args)

        server_class = _Server6 if ":" in self.host else _Server  # an IPv6 address: "::"
        self._httpd = server_class((self.host, self.port), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="gpuhint-metrics", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
