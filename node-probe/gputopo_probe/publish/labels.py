"""The Node's summary labels (DESIGN.md): GPU count and model, interconnect, NVLink domain, NICs, health."""

from __future__ import annotations

from collections import Counter
from itertools import combinations

from gputopo.api.labels import (
    LABEL_GPU_COUNT,
    LABEL_GPU_MODEL,
    LABEL_GPUDIRECT_RDMA,
    LABEL_HEALTH,
    LABEL_INTERCONNECT,
    LABEL_NIC_COUNT,
    LABEL_NIC_RATE,
    LABEL_NVLINK_DOMAIN,
    label_value,
)
from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Topology
from gputopo_probe.status import node_health

__all__ = ["interconnect_class", "node_labels", "nvlink_domain_size"]


def nvlink_domain_size(topology: Topology) -> int:
    """The largest set of GPUs every pair of which has a usable NVLink (1 when there is none)."""
    try:
        from gputopo.topology import nvlink_domain_size as shared  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        pass
    else:
        return int(shared(topology))
    n = topology.gpu_count
    matrix = topology.nvlink_matrix
    best = 1 if n else 0
    for size in range(n, 1, -1):
        if size <= best:
            break
        for group in combinations(range(n), size):
            if all(matrix[a][b] for a, b in combinations(group, 2)):
                return size
    return best


def interconnect_class(topology: Topology) -> str:
    """``nvswitch``, ``nvlink-mesh``, ``nvlink-pairs`` or ``pcie``."""
    try:
        from gputopo.topology import interconnect_class as shared  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        pass
    else:
        return str(getattr(shared(topology), "value", shared(topology)))
    kinds = {link.kind for link in topology.links.values()}
    if LinkKind.NVSWITCH in kinds:
        return "nvswitch"
    if LinkKind.NVLINK not in kinds:
        return "pcie"
    degree: Counter[int] = Counter()
    for (a, b), link in topology.links.items():
        if link.kind is LinkKind.NVLINK:
            degree[a] += 1
            degree[b] += 1
    return "nvlink-pairs" if max(degree.values()) == 1 else "nvlink-mesh"


def node_labels(topology: Topology) -> dict[str, str]:
    rates = Counter(n.rate_gbps for n in topology.nics if n.rate_gbps > 0)
    rate = rates.most_common(1)[0][0] if rates else 0.0
    return {
        LABEL_GPU_COUNT: str(topology.gpu_count),
        LABEL_GPU_MODEL: label_value(topology.gpu_model) or "unknown",
        LABEL_INTERCONNECT: interconnect_class(topology),
        LABEL_NVLINK_DOMAIN: str(nvlink_domain_size(topology)),
        LABEL_NIC_COUNT: str(len(topology.nics)),
        LABEL_NIC_RATE: str(int(rate)) if float(rate).is_integer() else str(rate),
        LABEL_GPUDIRECT_RDMA: "true" if topology.system.gpudirect_rdma else "false",
        LABEL_HEALTH: node_health(topology),
    }
