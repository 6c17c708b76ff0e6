"""Plain-data builders for controller tests: jobs, pods, nodes and the cluster view."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gputopo.api.nodepodgpus import PodGpus
from gputopo.api.nodetopology import FabricState, GpuHealthState, LinkState, NicState
from gputopo.api.trainingjob import TrainingJobSpec, TrainingJobStatus
from gputopo.control.facts import JobFacts, NodeFacts, PodFacts, PodGpusFacts, TopologyFacts, job_facts
from gputopo.control.view import ClusterView
from gputopo.topology.catalog import load_node_type
from gputopo.topology.fabric import health_mask, with_fabric
from gputopo.topology.model import Topology

if TYPE_CHECKING:  # the replay imports this module with f5ae149's operator, which has no gangs.unbound
    from gputopo.gangs.unbound import Refusal

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
TIER0 = "fabric.topograph.run/tier-0"
TIER1 = "fabric.topograph.run/tier-1"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def template(gpus: int | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "trainer", "image": "pytorch:latest"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [container], **spec}}


def job(
    name: str = "llm",
    *,
    workers: int = 1,
    gpus: int = 8,
    priority: int = 0,
    created: float = 0.0,
    status: TrainingJobStatus | None = None,
    namespace: str = "default",
    **spec: Any,
) -> JobFacts:
    body = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": at(created).isoformat(),
        },
        "spec": {"workers": workers, "gpusPerWorker": gpus, "priority": priority, "template": template(), **spec},
    }
    facts = job_facts(body)
    return replace(facts, status=status) if status is not None else facts


def spec_of(facts: JobFacts) -> TrainingJobSpec:
    assert facts.spec is not None
    return facts.spec


def pod(
    job_: JobFacts,
    rank: int,
    *,
    node: str = "",
    gpus: tuple[int, ...] = (),
    generation: int = 1,
    phase: str = "Pending",
    deleting: bool = False,
    unschedulable_since: datetime | None = None,
    refusal: Refusal | None = None,
) -> PodFacts:
    if unschedulable_since is not None:
        from gputopo.gangs.unbound import UNSCHEDULABLE, Refusal

        refusal = Refusal(UNSCHEDULABLE, "0/2 nodes are available", unschedulable_since)
    return PodFacts(
        namespace=job_.namespace,
        name=f"{job_.name}-{rank}",
        uid=f"pod-{job_.name}-{rank}",
        node=node,
        gpus_requested=len(gpus),
        job=job_.name,
        rank=rank,
        owner_uid=job_.uid,
        planned_gpus=gpus,
        generation=generation,
        phase=phase,
        deleting=deleting,
        refusal=refusal,
        scheduled_at=T0 if node else None,
    )


def foreign_pod(name: str, node: str, gpus: int, namespace: str = "other") -> PodFacts:
    return PodFacts(namespace=namespace, name=name, node=node, gpus_requested=gpus, phase="Running")


class ClusterBuilder:
    def __init__(self) -> None:
        self.topologies: dict[str, Topology] = {}
        self.nodes: dict[str, NodeFacts] = {}
        self.real: dict[str, list[PodGpus]] = {}
        self.pods: list[PodFacts] = []
        self.observed_at = T0 + timedelta(seconds=5)
        self.seen_at: datetime | None = None  # the probe's last publication, when later than observed_at

    def node(
        self, name: str, node_type: str = "hgx-h100", leaf: str = "leaf-a", spine: str = "spine-a"
    ) -> ClusterBuilder:
        self.topologies[name] = load_node_type(node_type)
        self.nodes[name] = NodeFacts(name, {TIER0: leaf, TIER1: spine}, ready=True, ready_since=T0)
        return self

    def tray(self, name: str, rack: str, leaf: str = "leaf-a") -> ClusterBuilder:
        """A GB200 tray of NVL72 rack ``rack`` (its GPUs registered in the rack's NVLink domain)."""
        topology = with_fabric(load_node_type("gb200-tray"), str(uuid.uuid5(uuid.NAMESPACE_DNS, rack)), 1)
        self.topologies[name] = topology
        self.nodes[name] = NodeFacts(name, {TIER0: leaf, TIER1: "spine-a"}, ready=True, ready_since=T0)
        return self

    def fabric(self, name: str, state: str) -> ClusterBuilder:
        """The tray's NVLink fabric reads ``degraded`` (less bandwidth) or ``down`` (not registered)."""
        t = self.topologies[name]
        gpus = []
        for g in t.gpus:
            assert g.fabric is not None
            fabric = (
                replace(g.fabric, health_mask=health_mask(degraded_bw=True))
                if state == "degraded"
                else replace(g.fabric, state=FabricState.NOT_STARTED)
            )
            gpus.append(replace(g, fabric=fabric))
        self.topologies[name] = Topology(tuple(gpus), t.links, t.nics, t.system)
        return self

    def link(self, name: str, a: int, b: int, state: LinkState = LinkState.DOWN) -> ClusterBuilder:
        self.topologies[name] = self.topologies[name].with_link_state(a, b, state)
        return self

    def nic(self, name: str, nic: str, state: NicState = NicState.DOWN) -> ClusterBuilder:
        self.topologies[name] = self.topologies[name].with_nic_state(nic, state)
        return self

    def unhealthy(self, name: str, gpu: int, reason: str = "XID 79") -> ClusterBuilder:
        self.topologies[name] = self.topologies[name].with_gpu_health(gpu, GpuHealthState.UNHEALTHY, reason)
        return self

    def not_ready(self, name: str, since: datetime) -> ClusterBuilder:
        self.nodes[name] = replace(self.nodes[name], ready=False, ready_since=since)
        return self

    def delete(self, name: str) -> ClusterBuilder:
        del self.nodes[name]
        return self

    def holds(self, node: str, namespace: str, pod_name: str, gpus: list[int]) -> ClusterBuilder:
        self.real.setdefault(node, []).append(PodGpus(namespace=namespace, name=pod_name, gpus=gpus))
        return self

    def with_pods(self, *pods: PodFacts) -> ClusterBuilder:
        self.pods.extend(pods)
        return self

    def view(self) -> ClusterView:
        return ClusterView(
            topologies={n: TopologyFacts(n, t) for n, t in self.topologies.items()},
            nodes=dict(self.nodes),
            pods=tuple(p for p in self.pods if p.node),
            pod_gpus={
                n: PodGpusFacts(
                    n,
                    tuple(self.real.get(n, ())),
                    pod_since={(p.namespace, p.name): self.observed_at for p in self.real.get(n, ())},
                    seen_at=self.seen_at or self.observed_at,
                )
                for n in self.topologies
            },
        )


def cluster() -> ClusterBuilder:
    return ClusterBuilder()
