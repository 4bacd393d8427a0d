"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
the browser reads commands on fd 3 and answers on fd 4, each message JSON ended by a NUL), so
that a test sees what a reader's browser does with a page: console errors, uncaught
exceptions, every network request, the rendered figures, and a screenshot.
Protocol reference: https://chromedevtools.github.io/devtools-protocol/
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    """The Chromium on the PATH, if any."""
    return next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)


@dataclass
class PageLoad:
    """What loading one page did."""

    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    result: object = None
    screenshot: bytes = b""


class Browser:
    """One headless Chromium with one page attached; a context manager."""

    def __init__(self, width: int = 1100, timeout_s: float = 60.0) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="chromium-")
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's fds 3 and 4 (copied out of the
            a, b = os.dup(to_r), os.dup(from_w)  # way first: either pipe may be 3 or 4)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
             f"--window-size={width},900", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []
        page = next(t for t in self.call("Target.getTargets")["targetInfos"]
                    if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable", session=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, session: bool = False, **params) -> dict:
        """Send a command and wait for its answer, keeping the events that arrive meanwhile."""
        self._next += 1
        msg: dict = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._read(deadline))

    def load(self, path: Path, expression: str, screenshot: bool = False) -> PageLoad:
        """Open a file, wait for its load event, evaluate ``expression`` (its value, as JSON
        would carry it), and take a screenshot of the whole page if asked."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=path.resolve().as_uri())
        self.wait_event("Page.loadEventFired")
        out = PageLoad()
        out.result = self.call("Runtime.evaluate", session=True, expression=expression,
                               returnByValue=True, awaitPromise=True)["result"].get("value")
        if screenshot:
            size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            out.screenshot = base64.b64decode(self.call(
                "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                      "scale": 1})["data"])
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.console_errors.append(json.dumps(p["args"])[:300])
            elif m == "Runtime.exceptionThrown":
                out.console_errors.append(p["exceptionDetails"].get("text", "exception"))
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.console_errors.append(p["entry"]["text"])
            elif m == "Network.requestWillBeSent":
                out.requests.append(p["request"]["url"])
        return out

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
