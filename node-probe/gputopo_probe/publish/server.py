"""/healthz, /readyz and /metrics (Prometheus) for one probe or a probe farm."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "ProbeServer", "parse_listen"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.polls = Counter("gputopo_probe_polls", "Health polls run", ["node"], registry=self.registry)
        self.poll_seconds = Histogram(
            "gputopo_probe_poll_seconds",
            "Time of one health poll",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0),
            registry=self.registry,
        )
        self.writes = Counter("gputopo_probe_api_writes", "Successful publishes", ["node"], registry=self.registry)
        self.api_errors = Counter("gputopo_probe_api_errors", "Failed publishes", ["node"], registry=self.registry)
        self.transitions = Counter(
            "gputopo_probe_health_transitions",
            "Published health transitions",
            ["node", "subject"],
            registry=self.registry,
        )
        self.unhealthy = Gauge(
            "gputopo_probe_unhealthy_items", "Links, NICs and GPUs not healthy now", ["node"], registry=self.registry
        )

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


def parse_listen(text: str) -> tuple[str, int] | None:
    """``HOST:PORT``; ``0`` or ``off`` disables the server."""
    if text in ("0", "off", ""):
        return None
    host, _, port = text.rpartition(":")
    return host or "0.0.0.0", int(port)


class ProbeServer:
    """``alive()`` backs /healthz (the loop is turning) and ``ready()`` /readyz (published at least once)."""

    def __init__(
        self, listen: tuple[str, int], metrics: Metrics, alive: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    owner._reply(self, owner.alive())
                elif self.path == "/readyz":
                    owner._reply(self, owner.ready())
                elif self.path == "/metrics":
                    body = owner.metrics.render()
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(404)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.metrics, self.alive, self.ready = metrics, alive, ready
        self.httpd = ThreadingHTTPServer(listen, Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="probe-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, ok: bool) -> None:
        body = b"ok\n" if ok else b"not ok\n"
        handler.send_response(200 if ok else 503)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def start(self) -> ProbeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
