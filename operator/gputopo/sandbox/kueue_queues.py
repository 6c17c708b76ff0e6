"""Kueue's queues for a sandbox's GPUs (``kueue.x-k8s.io/v1beta2``): two flavors of the same nodes, one for
gputopo-placed work and one for Kueue's own Topology-Aware Scheduling, each with a ClusterQueue and a LocalQueue.

- ``gputopo`` (ResourceFlavor, ClusterQueue and LocalQueue): a flavor without a topology. Kueue admits by quota
  and places nothing; the pods of an admitted workload are gputopo's (or kube-scheduler's) to place.
- ``kueue-tas``: a flavor naming the Topology ``gputopo-sandbox`` (the sandbox's tier-1 and tier-0 switch labels
  and ``kubernetes.io/hostname``). Kueue places the pods of a workload admitted here itself: it gates them
  (``kueue.x-k8s.io/topology``), picks a domain for the podset's ``kueue.x-k8s.io/podset-required-topology`` or
  ``-preferred-topology``, and ungates each pod with a node selector for its host.

Each ClusterQueue holds the whole sandbox (its nodes' allocatable GPUs, CPU and memory) and admits workloads
from every namespace; the two are separate, so a run uses one or the other, never both at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from gputopo.api.group import GPU_RESOURCE
from gputopo.control.facts import QUEUE_LABEL
from gputopo.gangs.annotations import KUEUE_PREFERRED_TOPOLOGY as PREFERRED_TOPOLOGY
from gputopo.gangs.annotations import KUEUE_REQUIRED_TOPOLOGY as REQUIRED_TOPOLOGY
from gputopo.gangs.kueuemarks import TOPOLOGY_GATE
from gputopo.sandbox.profiles import TIER0_LABEL, TIER1_LABEL

__all__ = [
    "GPUTOPO_QUEUE",
    "GPU_NODE_LABELS",
    "HOSTNAME_LABEL",
    "KUEUE_API",
    "PREFERRED_TOPOLOGY",
    "QUEUE_LABEL",
    "REQUIRED_TOPOLOGY",
    "TAS_QUEUE",
    "TOPOLOGY",
    "TOPOLOGY_GATE",
    "TOPOLOGY_LEVELS",
    "capacity_quota",
    "cluster_queue",
    "local_queue",
    "resource_flavor",
    "sandbox_queues",
    "topology",
]

KUEUE_API = "kueue.x-k8s.io/v1beta2"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true"}
GPUTOPO_QUEUE = "gputopo"
TAS_QUEUE = "kueue-tas"
TOPOLOGY = "gputopo-sandbox"
# Broadest first, as Kueue wants them: spine switch, leaf switch, node.
TOPOLOGY_LEVELS = (TIER1_LABEL, TIER0_LABEL, HOSTNAME_LABEL)
COVERED = (GPU_RESOURCE, "cpu", "memory")
_SUFFIXES: dict[str, Fraction] = {
    "m": Fraction(1, 1000),
    **{suffix: Fraction(1000**power) for power, suffix in enumerate("kMGTPE", start=1)},
    **{f"{suffix}i": Fraction(1024**power) for power, suffix in enumerate("KMGTPE", start=1)},
}


def _quantity(text: str) -> Fraction:
    """A Kubernetes quantity without exponent notation (``128``, ``500m``, ``2Ti``)."""
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return Fraction(text)


def capacity_quota(nodes: Sequence[Mapping[str, Any]], resources: Sequence[str] = COVERED) -> dict[str, str]:
    """The summed allocatable ``resources`` of ``nodes`` (Node objects), as nominal quotas: what a ClusterQueue
    needs to admit work that fills them."""
    totals = dict.fromkeys(resources, Fraction(0))
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource in resources:
            totals[resource] += _quantity(str(allocatable.get(resource, "0")))
    return {r: str(int(v)) if v.denominator == 1 else f"{int(v * 1000)}m" for r, v in totals.items()}


def topology(name: str = TOPOLOGY, levels: Sequence[str] = TOPOLOGY_LEVELS) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def resource_flavor(name: str, node_labels: Mapping[str, str], topology_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels)}
    if topology_name:
        spec["topologyName"] = topology_name
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, quota: Mapping[str, str], *, cohort: str | None = None) -> dict[str, Any]:
    """A ClusterQueue of one flavor with ``quota`` (resource -> nominal quota), open to every namespace."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {"name": flavor, "resources": [{"name": r, "nominalQuota": str(q)} for r, q in quota.items()]}
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def sandbox_queues(quota: Mapping[str, str], namespace: str = "default") -> list[dict[str, Any]]:
    """The Topology, both flavors, their ClusterQueues with ``quota`` each and their LocalQueues in
    ``namespace`` (see the module's docstring)."""
    return [
        topology(),
        resource_flavor(GPUTOPO_QUEUE, GPU_NODE_LABELS),
        resource_flavor(TAS_QUEUE, GPU_NODE_LABELS, TOPOLOGY),
        cluster_queue(GPUTOPO_QUEUE, GPUTOPO_QUEUE, quota),
        cluster_queue(TAS_QUEUE, TAS_QUEUE, quota),
        local_queue(GPUTOPO_QUEUE, namespace, GPUTOPO_QUEUE),
        local_queue(TAS_QUEUE, namespace, TAS_QUEUE),
    ]
