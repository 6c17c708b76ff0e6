"""Headless Chromium for tests of the live map, driven over the DevTools protocol (CDP) with aiohttp's websocket
client: open a page, evaluate JavaScript in it, take a screenshot. Debian's ``chromium`` package is enough; no
driver, no npm."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from gputopo.sandbox.errors import SandboxError

__all__ = ["CHROMIUM_FLAGS", "Browser", "chromium_path"]

# Flags that work on a headless CI machine with no display, no GPU, no network beyond localhost.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Browser:
    """One Chromium with one page; use as a context manager (``with Browser() as page: ...``)."""

    def __init__(self, width: int = 1600, height: int = 1000, start_timeout: float = 30.0) -> None:
        self._size = (width, height)
        self._start_timeout = start_timeout
        self._profile = tempfile.TemporaryDirectory(prefix="gputopo-chromium-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._loop = asyncio.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    def __enter__(self) -> Browser:
        binary = chromium_path()
        if binary is None:
            raise SandboxError("no chromium on PATH (apt-get install chromium)")
        width, height = self._size
        self._proc = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self._profile.name}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self._start_timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise SandboxError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        self._loop.run_until_complete(self._connect(port))
        return self

    async def _connect(self, port: int) -> None:
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self._call("Page.enable")
        await self._call("Runtime.enable")

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        ident = next(self._ids)
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = await self._ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise SandboxError(f"chromium closed its DevTools connection during {method}")
            data = json.loads(message.data)
            if data.get("id") == ident:
                if "error" in data:
                    raise SandboxError(f"{method}: {data['error'].get('message')}")
                result: dict[str, Any] = data.get("result", {})
                return result

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self._loop.run_until_complete(self._call(method, **params))

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value: JSON-able)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise SandboxError(f"page script failed: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        async def close() -> None:
            if self._ws is not None:
                await self._ws.close()
            if self._session is not None:
                await self._session.close()

        self._loop.run_until_complete(close())
        self._loop.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._profile.cleanup()
