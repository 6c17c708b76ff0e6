"""The shipped Grafana dashboard draws only metrics the operator and the probes export, and has the panels for
pending gangs by reason and for each link's faults."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from gputopo.controller.metrics import Metrics
from gputopo_probe.publish.server import Metrics as ProbeMetrics

DASHBOARD = Path(__file__).parents[3] / "charts" / "gputopo" / "files" / "dashboards" / "gputopo.json"


def _exported(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names |= {s.name for s in family.samples} | {family.name}
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def _exprs() -> dict[str, list[str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in panels}


def test_every_metric_the_dashboard_draws_is_exported() -> None:
    operator, probe = Metrics(), ProbeMetrics()
    operator.observe_pending({})
    probe.transitions.labels("n", "link 0-1").inc()
    probe.polls.labels("n").inc()
    known = _exported(operator.registry) | _exported(probe.registry)
    for title, exprs in _exprs().items():
        for expr in exprs:
            for name in re.findall(r"\bgputopo_[a-z_]+", expr):
                assert name in known, f"panel {title!r} draws {name}, which nothing exports"


def test_pending_by_reason_and_per_link_faults_are_drawn() -> None:
    exprs = _exprs()
    assert exprs["Pending gangs by reason"] == ["sum by (reason) (gputopo_pending_gangs)"]
    (links,) = exprs["Link and NIC faults per link"]
    assert 'gputopo_probe_health_transitions_total{subject=~"link .*|nic .*"}' in links
