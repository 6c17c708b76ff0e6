"""The Node's summary labels (DESIGN.md): GPU count and model, interconnect, NVLink domain, NICs, health.

On a multi-node NVLink domain (an NVL72 rack) the node also gets its clique, as ``gputopo.io/nvlink.clique``
and as GPU Feature Discovery's ``nvidia.com/gpu.clique`` (same value, same rule); the publisher leaves the
latter out when GFD already owns it.
"""

from __future__ import annotations

from collections import Counter

from gputopo.api.labels import (
    LABEL_GFD_CLIQUE,
    LABEL_GPU_COUNT,
    LABEL_GPU_MODEL,
    LABEL_GPUDIRECT_RDMA,
    LABEL_HEALTH,
    LABEL_INTERCONNECT,
    LABEL_NIC_COUNT,
    LABEL_NIC_RATE,
    LABEL_NVLINK_CLIQUE,
    LABEL_NVLINK_DOMAIN,
    label_value,
)
from gputopo.topology import interconnect_class, nvlink_domain_size
from gputopo.topology.fabric import node_domain
from gputopo.topology.model import Topology
from gputopo_probe.status import node_health

__all__ = ["node_labels"]


def node_labels(topology: Topology) -> dict[str, str]:
    rates = Counter(n.rate_gbps for n in topology.nics if n.rate_gbps > 0)
    rate = rates.most_common(1)[0][0] if rates else 0.0
    labels = {
        LABEL_GPU_COUNT: str(topology.gpu_count),
        LABEL_GPU_MODEL: label_value(topology.gpu_model) or "unknown",
        LABEL_INTERCONNECT: interconnect_class(topology),
        LABEL_NVLINK_DOMAIN: str(nvlink_domain_size(topology)),
        LABEL_NIC_COUNT: str(len(topology.nics)),
        LABEL_NIC_RATE: str(int(rate)) if float(rate).is_integer() else str(rate),
        LABEL_GPUDIRECT_RDMA: "true" if topology.system.gpudirect_rdma else "false",
        LABEL_HEALTH: node_health(topology),
    }
    clique = node_domain(topology).clique
    if clique:
        labels[LABEL_NVLINK_CLIQUE] = clique
        labels[LABEL_GFD_CLIQUE] = clique
    return labels
