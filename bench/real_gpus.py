"""The cluster as the estimator sees it, and the GPUs each pod really holds; one bus-bandwidth estimator for
every side of a benchmark.

Real GPUs: the fake probes' PodResources report (NodePodGpus ``status.pods``; the lowest free indices where a
pod is not reported), or in dra mode the rank's ResourceClaim ``status.allocation.devices.results`` (device
``gpu-<i>`` is GPU ``i``). Bus bandwidth: ``gputopo.topology.estimate_gang`` on those GPUs with the operator's
tier oversubscription (1 in a leaf, 2 in a spine, 4 beyond).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gang_trace import Job
from gputopo.api.group import DRA_DRIVER, LABEL_JOB
from gputopo.api.nodepodgpus import NodePodGpusStatus, PodGpus
from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.placement.types import DEFAULT_TIERS
from gputopo.topology import Topology, estimate_gang, from_status

__all__ = [
    "ClusterFacts",
    "device_plugin_gpus",
    "dra_gpus",
    "gang_busbw",
    "oversubscription",
    "pods_by_node",
    "read_cluster",
    "reported_in",
    "reported_pods",
    "wait_reported",
]


@dataclass
class ClusterFacts:
    topologies: dict[str, Topology]
    labels: dict[str, dict[str, str]]
    reported: dict[tuple[str, str], list[int]]  # (namespace, pod) -> GPUs, from NodePodGpus status.pods
    reported_on: dict[str, list[tuple[str, str]]]  # node -> pods it reports


def reported_pods(custom: Any) -> dict[str, list[PodGpus]]:
    """Node -> the pods its probe reports holding GPUs (every NodePodGpus ``status.pods``)."""
    listed = custom.list_cluster_custom_object("gputopo.io", "v1alpha1", "nodepodgpus")
    return {
        item["metadata"]["name"]: NodePodGpusStatus.model_validate(item.get("status") or {}).pods
        for item in listed["items"]
    }


def reported_in(custom: Any, namespace: str) -> int:
    return sum(1 for entries in reported_pods(custom).values() for e in entries if e.namespace == namespace)


def wait_reported(custom: Any, namespace: str, pods: int, timeout: float = 30.0) -> int:
    """Let the probes publish which GPUs the pods got: wait until ``pods`` entries of ``namespace`` show."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = reported_in(custom, namespace)
        if seen >= pods:
            break
        time.sleep(1.0)
    return seen


def read_cluster(core: Any, custom: Any) -> ClusterFacts:
    topologies: dict[str, Topology] = {}
    reported: dict[tuple[str, str], list[int]] = {}
    reported_on: dict[str, list[tuple[str, str]]] = {}
    listed = custom.list_cluster_custom_object("gputopo.io", "v1alpha1", "nodetopologies")
    for item in listed["items"]:
        status = NodeTopologyStatus.model_validate(item.get("status") or {})
        if status.gpus:
            topologies[item["metadata"]["name"]] = from_status(status)
    for name, entries in reported_pods(custom).items():
        for entry in entries:
            reported[(entry.namespace, entry.name)] = list(entry.gpus)
            reported_on.setdefault(name, []).append((entry.namespace, entry.name))
    labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in core.list_node().items}
    return ClusterFacts(topologies, labels, reported, reported_on)


def oversubscription(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]]) -> tuple[float, str]:
    """The operator's default tier factor for a gang spread over ``nodes``."""
    if len(set(nodes)) <= 1:
        return 1.0, "one node"
    for i, level in enumerate(DEFAULT_TIERS.levels):
        switches = {labels.get(n, {}).get(level.label) for n in nodes}
        if len(switches) == 1 and None not in switches:
            return level.oversubscription, f"tier {i}"
    return DEFAULT_TIERS.beyond_top, "beyond the top tier"


def gang_busbw(members: Mapping[str, Sequence[int]], facts: ClusterFacts) -> tuple[float, str, str]:
    nodes = sorted(members)
    factor, tier = oversubscription(nodes, facts.labels)
    estimate = estimate_gang([(facts.topologies[n], sorted(members[n])) for n in nodes], oversubscription=factor)
    return estimate.busbw_gbps, estimate.bottleneck, tier


def pods_by_node(trace: Sequence[Job], nodes: Mapping[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Node -> (pod, GPUs it asks for) of the trace's pods that ``nodes`` (pod -> node) places."""
    pods_on: dict[str, list[tuple[str, int]]] = {}
    for job in trace:
        for pod in job.pods():
            if pod in nodes:
                pods_on.setdefault(nodes[pod], []).append((pod, job.gpus_per_worker))
    return pods_on


def device_plugin_gpus(
    namespace: str, pods_on: Mapping[str, list[tuple[str, int]]], facts: ClusterFacts
) -> tuple[dict[str, list[int]], int]:
    """The GPUs each bound pod holds: the fake probe's report, else the lowest indices nobody holds."""
    held: dict[str, list[int]] = {}
    fallbacks = 0
    for node, pods in pods_on.items():
        topology = facts.topologies[node]
        used = {g for key in facts.reported_on.get(node, []) for g in facts.reported[key]}
        for pod, size in sorted(pods):
            gpus = facts.reported.get((namespace, pod))
            if gpus is None or len(gpus) != size:
                free = [g for g in range(topology.gpu_count) if g not in used]
                gpus = free[:size]
                fallbacks += 1
            used.update(gpus)
            held[pod] = gpus
    return held, fallbacks


def dra_gpus(custom: Any, core: Any, namespace: str) -> dict[str, tuple[str, list[int]]]:
    """pod -> (node, GPU indices) from the ResourceClaim each pod names: its allocation's devices."""
    listed = custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")
    held: dict[str, tuple[str, list[int]]] = {}
    claims = {c["metadata"]["name"]: c for c in listed["items"]}
    for pod in core.list_namespaced_pod(namespace, label_selector=LABEL_JOB).items:
        for ref in pod.spec.resource_claims or []:
            claim = claims.get(ref.resource_claim_name or "")
            allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
            results = [r for r in (allocation.get("devices") or {}).get("results") or [] if r["driver"] == DRA_DRIVER]
            if results:
                pools = {r["pool"] for r in results}
                held[pod.metadata.name] = (
                    pools.pop() if len(pools) == 1 else "?",
                    sorted(int(r["device"].removeprefix("gpu-")) for r in results),
                )
    return held
