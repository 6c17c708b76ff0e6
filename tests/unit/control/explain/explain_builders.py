"""Fluent builders of the objects ``kubectl gputopo`` lists, as plain bodies: nodes of catalog types under leaf and
spine switches, TrainingJobs pending or placed, GangPlacements, PriorityClasses."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gputopo.api.nodetopology import LinkState, NicState
from gputopo.control.explain import LiveCluster, LiveObjects, live_cluster
from gputopo.placement.types import DEFAULT_TIERS
from gputopo.topology.catalog import load_node_type
from gputopo.topology.convert import to_status
from gputopo.topology.model import Topology

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TIER0 = "fabric.topograph.run/tier-0"
TIER1 = "fabric.topograph.run/tier-1"


class ClusterBuilder:
    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {k: [] for k in LiveObjects.__dataclass_fields__}
        self._topologies: dict[str, Topology] = {}

    def node(
        self, name: str, kind: str = "hgx-h100", *, leaf: str = "leaf-0", spine: str = "spine-0", cordoned: bool = False
    ) -> ClusterBuilder:
        self._topologies[name] = load_node_type(kind)
        self.objects["nodes"].append(
            {
                "metadata": {"name": name, "labels": {TIER0: leaf, TIER1: spine}},
                "spec": {"unschedulable": cordoned},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        return self

    def link(self, node: str, a: int, b: int, state: LinkState = LinkState.DOWN) -> ClusterBuilder:
        topology = self._topologies[node]
        links = dict(topology.links)
        links[(a, b)] = replace(links[(a, b)], state=state)
        self._topologies[node] = replace(topology, links=links)
        return self

    def nic(self, node: str, name: str, state: NicState = NicState.DOWN) -> ClusterBuilder:
        topology = self._topologies[node]
        nics = tuple(replace(n, state=state) if n.name == name else n for n in topology.nics)
        self._topologies[node] = replace(topology, nics=nics)
        return self

    def job(
        self,
        name: str,
        *,
        workers: int = 1,
        gpus: int = 8,
        on: list[tuple[str, list[int]]] | None = None,
        reason: str = "Unplaceable",
        message: str = "needs more",
        priority_class: str | None = None,
        priority: int | None = None,
        invalid: str = "spec.priorityClassName: no PriorityClass named 'gone'",
        namespace: str = "default",
        **spec: Any,
    ) -> ClusterBuilder:
        body_spec: dict[str, Any] = {
            "workers": workers,
            "gpusPerWorker": gpus,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}},
            **spec,
        }
        if priority_class:
            body_spec["priorityClassName"] = priority_class
        if priority is not None:
            body_spec["priority"] = priority
        status: dict[str, Any]
        if on is not None:
            status = {
                "phase": "Running",
                "startTime": "2026-01-01T11:00:00Z",
                "placement": {
                    "generation": 1,
                    "estimatedBusBandwidthGBps": 370.5,
                    "bottleneck": "NVSwitch",
                    "workers": [{"rank": r, "node": n, "gpus": g, "nics": []} for r, (n, g) in enumerate(on)],
                },
                "conditions": [{"type": "Placed", "status": "True", "reason": "Placed", "message": "placed"}],
            }
        else:
            conditions = [{"type": "Placed", "status": "False", "reason": reason, "message": message}]
            if reason == "InvalidSpec":
                conditions.append({"type": "Invalid", "status": "True", "reason": reason, "message": invalid})
            status = {"phase": "Pending", "conditions": conditions}
        self.objects["jobs"].append(
            {
                "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
                "spec": body_spec,
                "status": status,
            }
        )
        return self

    def gang(
        self, name: str, phase: str, message: str = "", *, ranks: list[tuple[str, list[int]]] = ()
    ) -> ClusterBuilder:  # type: ignore[assignment]
        self.objects["gangs"].append(
            {
                "metadata": {"name": f"job-{name}", "namespace": "default"},
                "spec": {"source": "job", "gang": name, "size": max(1, len(ranks))},
                "status": {
                    "phase": phase,
                    "message": message,
                    "ranks": [{"rank": r, "node": n, "gpus": g} for r, (n, g) in enumerate(ranks)],
                    "estimatedBusBandwidthGBps": 100.0 if ranks else 0.0,
                    "bottleneck": "NVLink" if ranks else "",
                },
            }
        )
        return self

    def priority_class(self, name: str, value: int, policy: str = "PreemptLowerPriority") -> ClusterBuilder:
        self.objects["priority_classes"].append(
            {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}
        )
        return self

    def build(self) -> LiveCluster:
        topologies = [
            {"metadata": {"name": n}, "status": to_status(t).model_dump(by_alias=True, mode="json", exclude_none=True)}
            for n, t in self._topologies.items()
        ]
        objects = LiveObjects(**{**self.objects, "topologies": topologies})
        return live_cluster(objects, DEFAULT_TIERS, NOW)


def cluster() -> ClusterBuilder:
    return ClusterBuilder()
