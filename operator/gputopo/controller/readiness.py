"""Whether the operator does its work: ready until ``failed_passes`` control passes in a row have failed.

kopf's ``/healthz`` says the process lives; it stays green while every pass fails (a bug tripped by some
object), and nothing is placed. ``/readyz``, served beside ``/metrics``, turns false after that many failed passes
in a row and true again with the next pass that completes, so the Deployment shows the operator not ready
(``kubectl get deploy``, the ``Available`` condition) instead of a live process doing nothing. A replica that
does not lead runs no pass and stays ready.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["READY_PATH", "Readiness", "with_readiness"]

READY_PATH = "/readyz"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass
class Readiness:
    """Failed control passes in a row, against the number that makes the operator not ready."""

    failed_passes: int = 3
    failed_in_a_row: int = 0
    last_failure: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # read from the server's thread

    @property
    def ready(self) -> bool:
        with self._lock:
            return self.failed_in_a_row < self.failed_passes

    def passed(self) -> None:
        with self._lock:
            self.failed_in_a_row, self.last_failure = 0, ""

    def failed(self, why: str) -> None:
        with self._lock:
            self.failed_in_a_row += 1
            self.last_failure = why

    def answer(self) -> tuple[str, bytes]:
        """The HTTP status and body ``/readyz`` answers with."""
        with self._lock:
            failed, why = self.failed_in_a_row, self.last_failure
        if failed < self.failed_passes:
            return "200 OK", b"ok\n"
        return "503 Service Unavailable", f"{failed} control passes in a row failed, the last: {why}\n".encode()


def with_readiness(app: WsgiApp, readiness: Readiness) -> WsgiApp:
    """``app`` (the metrics), with ``READY_PATH`` answered by ``readiness``."""

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != READY_PATH:
            return app(environ, start_response)
        status, body = readiness.answer()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return serve
