"""The HTML report in a real headless Chromium: every figure renders, nothing is fetched.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL bytes on file descriptors 3 and 4), so no port, no
websocket library. The browser comes from Debian's ``chromium`` package, which
``scripts/test.sh`` installs when run as root; ``GPUHINT_TEST_CHROMIUM`` names another
binary. Without a browser this test FAILS, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpuhint.cli import main

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"


def _chromium() -> str:
    for name in (os.environ.get("GPUHINT_TEST_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    pytest.fail(
        "no Chromium: install Debian's chromium (apt-get install -y chromium; scripts/test.sh "
        "does it when run as root) or set GPUHINT_TEST_CHROMIUM",
        pytrace=False,
    )


class Cdp:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds() -> None:  # in the child: fd 3 reads commands, fd 4 writes replies
            a, b = os.dup(to_r), os.dup(from_w)  # either may be fd 3 or 4 already
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            preexec_fn=fds,
            pass_fds=(3, 4),  # kept open through exec (subprocess closes the others after fds())
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_r, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the debugging pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)  # type: ignore[no-any-return]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})  # type: ignore[no-any-return]
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            self.events.append(m)
            if m.get("method") == method:
                return m

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)


def render(
    binary: str, html: Path, profile: Path, texts: dict[str, str] | None = None
) -> tuple[list[list[Any]], list[str]]:
    """Open ``html`` in Chromium: each <img> as [alt, complete, naturalWidth, src head],
    and every URL the page requested other than itself and ``data:`` URLs. ``texts``, if
    given, receives the rendered text of the ``#actions`` box and of the page."""
    cdp = Cdp(binary, profile)
    url = html.resolve().as_uri()
    try:
        targets = cdp.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = cdp.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        cdp.call("Network.enable", session)
        cdp.call("Page.enable", session)
        cdp.call("Page.navigate", session, url=url)
        cdp.wait_event("Page.loadEventFired")
        res = cdp.call(
            "Runtime.evaluate",
            session,
            expression="JSON.stringify(Array.from(document.images).map("
            "i => [i.alt, i.complete, i.naturalWidth, i.src.slice(0, 21)]))",
            returnByValue=True,
        )
        images = json.loads(res["result"]["value"])
        if texts is not None:
            res = cdp.call(
                "Runtime.evaluate",
                session,
                expression="JSON.stringify({actions: (document.getElementById('actions') "
                "|| {innerText: ''}).innerText, page: document.body.innerText})",
                returnByValue=True,
            )
            texts.update(json.loads(res["result"]["value"]))
        requests = [
            e["params"]["request"]["url"]
            for e in cdp.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
    finally:
        cdp.close()
    assert url in requests  # the listener did see the page's own request
    return images, [u for u in requests if u != url and not u.startswith("data:")]


def test_report_renders_offline_in_chromium(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = _chromium()
    out = tmp_path / "report"
    rc = main(
        [
            "analyze",
            str(DATA / "philly_excerpt.json"),
            "-o",
            str(out),
            "--series",
            str(DATA / "earth_8vcs_nodes_2020-05-20_3days.csv.gz"),
            "--ces-test-days",
            "1",
            "--no-progress",
        ]
    )
    capsys.readouterr()
    assert rc == 0
    numbers = json.loads((out / "analysis.json").read_text())
    n_figures = len(numbers["figures"])
    assert n_figures == 10  # every section and both gpuhint summaries
    # the report must not depend on its sibling files
    for png in out.glob("*.png"):
        png.unlink()
    texts: dict[str, str] = {}
    images, fetched = render(binary, out / "report.html", tmp_path / "profile", texts)
    # the Actions box at the top (before the first section), one item per action
    box = texts["actions"]
    assert 0 < texts["page"].index(box) < texts["page"].index("At a glance")
    assert box.startswith("Actions")
    for a in numbers["actions"]:
        assert a["action"] in box and a["knob"] in box
    assert box.count("why:") == len(numbers["actions"]) == 2
    assert len(images) == n_figures
    for alt, complete, width, src in images:
        assert complete and width > 0, f"figure {alt!r} did not render"
        assert src == "data:image/png;base64", alt
    assert fetched == [], f"the report fetched {fetched}"


def test_the_check_sees_fetches_and_broken_figures(tmp_path: Path) -> None:
    """The same check on a page that fetches and has a broken image does fail."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img alt="remote" src="http://127.0.0.1:9/x.png">'
        '<img alt="broken" src="data:image/png;base64,AAAA"></body></html>'
    )
    images, fetched = render(_chromium(), page, tmp_path / "profile")
    assert fetched == ["http://127.0.0.1:9/x.png"]
    assert [(alt, width) for alt, _, width, _ in images] == [("remote", 0), ("broken", 0)]
