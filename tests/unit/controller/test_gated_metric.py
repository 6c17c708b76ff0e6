"""The age of the oldest pod gputopo's gate holds, as the scrape reads it from the gang watch's pods."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import generate_latest

from gputopo.controller.metrics import Metrics, oldest_gated_age
from gputopo.gangs.model import GATE

NOW = datetime(2026, 12, 7, 20, 0, tzinfo=UTC).timestamp()


def pod(created: str | None, *gates: str) -> dict[str, Any]:
    meta = {"name": "p", "namespace": "ml"} | ({"creationTimestamp": created} if created is not None else {})
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": g} for g in gates]}}


CASES = [
    ("none", [], 0.0),
    ("one-gated", [pod("2026-12-07T19:50:00Z", GATE)], 600.0),
    ("oldest-of-several", [pod("2026-12-07T19:59:00Z", GATE), pod("2026-12-07T19:00:00Z", "x", GATE)], 3600.0),
    ("another-gate-only", [pod("2026-12-07T18:00:00Z", "kueue.x-k8s.io/admission")], 0.0),
    ("steered-gate-lifted", [pod("2026-12-07T18:00:00Z")], 0.0),
    ("no-timestamp", [pod(None, GATE)], 0.0),
    ("bad-timestamp", [pod("yesterday", GATE), pod("2026-12-07T19:59:30Z", GATE)], 30.0),
    ("clock-behind", [pod("2026-12-07T20:01:00Z", GATE)], 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pods", "age"), CASES, ids=[c[0] for c in CASES])
def test_oldest_gated_age(case: str, pods: list[dict[str, Any]], age: float) -> None:
    assert oldest_gated_age(pods, NOW) == age, case


def test_a_store_changed_under_the_scrape_gives_what_was_seen() -> None:
    def changing() -> Iterator[Mapping[str, Any]]:
        yield pod("2026-12-07T19:55:00Z", GATE)
        raise RuntimeError("dictionary changed size during iteration")

    assert oldest_gated_age(changing(), NOW) == 300.0


def test_the_gauge_reads_the_pods_at_each_scrape_and_stops_at_zero() -> None:
    metrics = Metrics()
    pods: list[dict[str, Any]] = []
    metrics.watch_gated(lambda: pods, clock=lambda: NOW)
    assert "gputopo_oldest_gated_pod_age_seconds 0.0" in generate_latest(metrics.registry).decode()
    pods.append(pod("2026-12-07T19:58:00Z", GATE))
    assert "gputopo_oldest_gated_pod_age_seconds 120.0" in generate_latest(metrics.registry).decode()
    metrics.watch_gated(None)
    assert "gputopo_oldest_gated_pod_age_seconds 0.0" in generate_latest(metrics.registry).decode()
