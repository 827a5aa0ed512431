"""Drive headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No port is opened and no driver binary is needed: Chromium reads commands
from fd 3 and writes replies and events to fd 4, each a JSON text ended by a
NUL byte. Enough of the protocol to load a page, evaluate an expression in
it, take a screenshot and collect console output.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


def chromium() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``), if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page, closed on exit."""

    def __init__(self, *, width: int = 1200, height: int = 900, timeout: float = 60.0) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed (scripts/bootstrap.sh installs it)")
        self.timeout = timeout
        self.events: list[dict[str, Any]] = []
        self._next = 0
        self._buf = b""
        self._profile = tempfile.TemporaryDirectory(prefix="nodetune-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()

        def wire() -> None:  # in the child: commands on fd 3, replies on fd 4
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-pipe", "--hide-scrollbars",
             f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, close_fds=False)
        os.close(cmd_r)
        os.close(out_w)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=self.session)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the browser and its profile directory."""
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._out_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def call(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command; return its result (events that arrive meanwhile are kept)."""
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Block until an event ``method`` arrives (or was already received)."""
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._read()
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def load(self, path: Path) -> None:
        """Navigate the page to a local file and wait for its load event."""
        self.events.clear()
        self.call("Page.navigate", session=self.session, url=path.resolve().as_uri())
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` evaluated in the page."""
        res = self.call("Runtime.evaluate", session=self.session, expression=expression,
                        returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """Save the full page as PNG."""
        data = self.call("Page.captureScreenshot", session=self.session, format="png",
                         captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console_problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions and browser log errors so far."""
        out = []
        for ev in self.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning",
                                                                                 "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                  for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Log.entryAdded":
                entry = params.get("entry", {})
                if entry.get("level") in ("error", "warning"):
                    out.append(f"log {entry.get('source')}: {entry.get('text')}")
        return out

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg
