"""Headless Chromium driven over its DevTools protocol (CDP), for tests that read a page.

Chromium is started with ``--remote-debugging-port=0`` and prints the browser's websocket
address on stderr ("DevTools listening on ws://..."); commands go over that one websocket
(``websocket-client``, already installed with the ``kubernetes`` client) to a page target
attached in flat mode. No driver, no new dependency.

:meth:`Tab.goto` loads an address, :meth:`Tab.evaluate` runs JavaScript in the page and
returns its value (JSON), :meth:`Tab.screenshot` returns a PNG; any CDP command goes through
:meth:`Tab.call`. A command with no answer in the tab's timeout fails, saying which.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--remote-debugging-port=0",
)  # fmt: skip
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class BrowserError(AssertionError):
    """Chromium did not start, or a command failed or went unanswered."""


class Tab:
    """One page target of the browser, attached over the browser's websocket."""

    def __init__(self, ws: websocket.WebSocket, session: str, timeout_s: float) -> None:
        self._ws, self._session, self._timeout_s, self._next = ws, session, timeout_s, 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command to the page and return its result (events are skipped)."""
        self._next += 1
        ident = self._next
        message = {"id": ident, "sessionId": self._session, "method": method, "params": params}
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
        raise BrowserError(f"{method}: no answer in {self._timeout_s:.0f} s")

    def goto(self, url: str) -> None:
        """Load ``url`` (returns once the navigation started; wait for the content after)."""
        answer = self.call("Page.navigate", url=url)
        if answer.get("errorText"):
            raise BrowserError(f"{url}: {answer['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (a promise is awaited)."""
        answer = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self, width: int, height: int) -> bytes:
        """A PNG of the page's top-left ``width`` x ``height`` px as drawn now."""
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        return base64.b64decode(
            self.call("Page.captureScreenshot", format="png", clip=clip)["data"]
        )


@contextmanager
def chromium(profile: Path, width: int = 1400, height: int = 2400) -> Iterator[Tab]:
    """A headless Chromium with one tab of ``width`` x ``height`` px, closed on exit."""
    if CHROMIUM is None:
        raise BrowserError("chromium is not installed (Debian package chromium)")
    profile.mkdir(parents=True, exist_ok=True)
    log = profile / "chromium.log"
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"]
    with log.open("wb") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while not (found := LISTENING.search(log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        ws = websocket.create_connection(found.group(1), timeout=60, suppress_origin=True)
        try:
            target = _browser_call(ws, 1, "Target.createTarget", url="about:blank")["targetId"]
            attached = _browser_call(ws, 2, "Target.attachToTarget", targetId=target, flatten=True)
            tab = Tab(ws, attached["sessionId"], timeout_s=60)
            tab.call("Page.enable")
            yield tab
        finally:
            ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _browser_call(
    ws: websocket.WebSocket, ident: int, method: str, **params: Any
) -> dict[str, Any]:
    """One command to the browser itself (not a page) and its result."""
    ws.send(json.dumps({"id": ident, "method": method, "params": params}))
    while True:
        reply = json.loads(ws.recv())
        if reply.get("id") == ident:
            if "error" in reply:
                raise BrowserError(str(reply["error"]))
            result: dict[str, Any] = reply["result"]
            return result
