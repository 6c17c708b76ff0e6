"""Counters read over HTTP while a benchmark runs: the operator's Prometheus histograms, and the API server's
own counts of requests and watch events (``apiserver_request_total``, ``apiserver_watch_events_total``).
"""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from collections.abc import Collection

from gputopo.sandbox import Sandbox

__all__ = ["MUTATING", "READING", "api_requests", "api_writes", "free_port", "scrape", "watch_events"]

MUTATING = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
READING = ("GET", "LIST", "WATCH", "WATCHLIST")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """Sums and counts of the operator's histograms (``name_sum`` / ``name_count``, labels summed over)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        if base.endswith(("_sum", "_count")):
            found[base] = found.get(base, 0.0) + float(value)
    return found


def _labelled(box: Sandbox, metric: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of ``metric`` on the API server's ``/metrics``: its labels (values unquoted) and value."""
    samples = []
    for line in box.kubectl("get", "--raw", "/metrics", timeout=60).splitlines():
        if line.startswith(metric + "{"):
            labels, _, value = line.rpartition(" ")
            fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(","))
            samples.append(({k: v.strip('"') for k, v in fields.items()}, float(value)))
    return samples


def api_writes(box: Sandbox) -> Counter[str]:
    """The API server's own count of writes so far (``apiserver_request_total``), by verb and resource."""
    return api_requests(box, MUTATING)


def watch_events(box: Sandbox) -> Counter[str]:
    """Watch events the API server has sent so far, by resource (``apiserver_watch_events_total``): what every
    watcher was sent, the background (Node heartbeats, leases) included."""
    found: Counter[str] = Counter()
    for fields, value in _labelled(box, "apiserver_watch_events_total"):
        found[fields.get("resource", "")] += int(value)
    return found


def api_requests(box: Sandbox, verbs: Collection[str]) -> Counter[str]:
    """The API server's own count of requests of these verbs so far, by verb and resource."""
    found: Counter[str] = Counter()
    for fields, value in _labelled(box, "apiserver_request_total"):
        verb = fields.get("verb", "")
        if verb in verbs:
            sub = fields.get("subresource", "")
            found[f"{verb} {fields.get('resource', '')}{'/' + sub if sub else ''}"] += int(value)
    return found
