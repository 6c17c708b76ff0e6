"""Node labels the probe publishes as a summary of a node's topology (see DESIGN.md).

Every value is a valid Kubernetes label value: at most 63 characters of ``[A-Za-z0-9._-]``, starting and
ending with an alphanumeric character.
"""

import re
from typing import Final

__all__ = [
    "LABEL_GFD_CLIQUE",
    "LABEL_GPUDIRECT_RDMA",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MODEL",
    "LABEL_HEALTH",
    "LABEL_INTERCONNECT",
    "LABEL_NIC_COUNT",
    "LABEL_NIC_RATE",
    "LABEL_NVLINK_CLIQUE",
    "LABEL_NVLINK_DOMAIN",
    "NODE_LABELS",
    "label_value",
]

_PREFIX: Final = "gputopo.io/"
LABEL_GPU_COUNT: Final = _PREFIX + "gpu.count"
LABEL_GPU_MODEL: Final = _PREFIX + "gpu.model"
LABEL_INTERCONNECT: Final = _PREFIX + "interconnect"
LABEL_NVLINK_DOMAIN: Final = _PREFIX + "nvlink.domain-size"
LABEL_NIC_COUNT: Final = _PREFIX + "nic.count"
LABEL_NIC_RATE: Final = _PREFIX + "nic.rate-gbps"
LABEL_GPUDIRECT_RDMA: Final = _PREFIX + "gpudirect-rdma"
LABEL_HEALTH: Final = _PREFIX + "health"
# The node's multi-node NVLink domain (an NVL72 rack's NVSwitch fabric): ``<clusterUuid>.<cliqueId>``, the
# value GPU Feature Discovery gives ``nvidia.com/gpu.clique``; absent on nodes outside such a domain.
LABEL_NVLINK_CLIQUE: Final = _PREFIX + "nvlink.clique"
LABEL_GFD_CLIQUE: Final = "nvidia.com/gpu.clique"

NODE_LABELS: Final = (
    LABEL_GPU_COUNT,
    LABEL_GPU_MODEL,
    LABEL_INTERCONNECT,
    LABEL_NVLINK_DOMAIN,
    LABEL_NIC_COUNT,
    LABEL_NIC_RATE,
    LABEL_GPUDIRECT_RDMA,
    LABEL_HEALTH,
)

_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """Turn free text (a GPU product name, say) into a valid label value, as GPU Feature Discovery does."""
    value = _INVALID.sub("-", text.strip())
    return value[:63].strip("-_.")
