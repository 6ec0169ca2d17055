"""A real Prometheus server on loopback that scrapes given targets (Debian's package).

Used by the tests to evaluate the Grafana dashboard's queries on real scrapes.
``GPUHINT_TEST_PROMETHEUS`` names the binary (default: ``prometheus`` on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from gpuhint.lab.local.services import LocalProcess, ServiceError, free_port


class LocalPrometheus(LocalProcess):
    """``prometheus`` scraping ``targets`` (``HOST:PORT``) every ``scrape_interval_s``."""

    name = "prometheus"

    def __init__(self, targets: Sequence[str], scrape_interval_s: float = 1.0) -> None:
        super().__init__()
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LocalPrometheus:
        exe = os.environ.get("GPUHINT_TEST_PROMETHEUS") or shutil.which("prometheus")
        if exe is None:
            raise ServiceError(
                "prometheus is not installed (apt-get install -y --no-install-recommends "
                "prometheus, or set GPUHINT_TEST_PROMETHEUS)"
            )
        interval = f"{max(1, int(self.scrape_interval_s * 1000))}ms"
        conf = self.workdir / "prometheus.yml"
        conf.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": interval, "evaluation_interval": interval},
                    "scrape_configs": [
                        {"job_name": "gpuhint", "static_configs": [{"targets": self.targets}]}
                    ],
                }
            )
        )
        self._spawn(
            [
                exe,
                f"--config.file={conf}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServiceError(f"prometheus exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.3)
        self.stop()
        raise ServiceError(f"prometheus not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; raises ``ValueError`` with Prometheus's error for a bad one."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise ValueError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
        return list(body["data"]["result"])
