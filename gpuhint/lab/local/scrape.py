r"""Scrape a running gpuhint process over real HTTP (for tests and the dashboard recorder).

>>> samples('# TYPE x_total counter\nx_total{a="1"} 3\n')
{('x_total', (('a', '1'),)): 3.0}
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str, timeout: float = 5.0, tries: int = 3) -> tuple[int, str]:
    """(status, body) of a GET; a 503 is an answer, not an error.

    A connection reset or timeout is retried (``tries`` in all): a loaded test machine.
    """
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (ConnectionResetError, TimeoutError):
            if attempt == tries - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed (name, sorted labels)."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample's value; raises AssertionError naming what was there instead."""
    key = (name, tuple(sorted(labels.items())))
    if key not in found:
        near = sorted(k for k in found if k[0] == name)
        raise AssertionError(f"no sample {name}{labels}; samples of that name: {near}")
    return found[key]


def total(found: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(v for (n, lab), v in found.items() if n == name and set(labels.items()) <= set(lab))


def wait_ready(base: str, timeout: float, log: Path | None = None) -> str:
    """Poll ``/healthz`` until 200; return its body."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            status, body = get(f"{base}/healthz", timeout=2)
            if status == 200:
                return body
            last = f"{status} {body.strip()}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{base}/healthz not ready after {timeout:.0f} s (last: {last})\n{tail}")
