"""gputopo.topology: the pure model of one GPU node and what is derived from it; no I/O, nothing above api.

GPUs, the link between every GPU pair, NICs and system facts (``model``); NVLink/PCIe bandwidth facts
(``bandwidth``); the ``nvidia-smi topo -m`` importer (``nvidia_smi``); conversion to and from the
NodeTopology status (``convert``); the all-reduce bus bandwidth estimator (``estimate``); derived views
(``views``) and well-connected GPU groups (``groups``); node types built from real fixtures (``catalog``).
Nothing here talks to the network, the API server or the GPUs.
"""

from gputopo.topology.bandwidth import (
    GpuSpec,
    NvlinkGeneration,
    gpu_spec,
    link_bandwidth_gbps,
    nvlink_generation,
    pcie_generation,
)
from gputopo.topology.catalog import NODE_TYPES, NodeType, load_node_type
from gputopo.topology.convert import from_status, to_status
from gputopo.topology.estimate import (
    BusBandwidth,
    clear_shared_tables,
    estimate_node,
    hop_gbps,
)
from gputopo.topology.gang import estimate_gang
from gputopo.topology.groups import Group, pair_allowed, well_connected_groups
from gputopo.topology.loader import load_topology, read_topology_text, with_gpu_model
from gputopo.topology.model import PCIE_LEVELS, Gpu, Link, Nic, SystemFacts, Topology, TopologyError, pair
from gputopo.topology.nccl import DEFAULT_NCCL, NcclSettings, NcclVersion
from gputopo.topology.nvidia_smi import (
    NvidiaSmiParseError,
    parse_nvidia_smi,
    parse_nvidia_smi_all,
    render_nvidia_smi,
)
from gputopo.topology.rails import inter_node_bandwidth, nic_assignment
from gputopo.topology.views import (
    interconnect_class,
    nearest_gpus,
    nearest_nics,
    nvlink_domain_size,
    nvlink_domains,
)

__all__ = [
    "DEFAULT_NCCL",
    "NODE_TYPES",
    "PCIE_LEVELS",
    "BusBandwidth",
    "Gpu",
    "GpuSpec",
    "Group",
    "Link",
    "NcclSettings",
    "NcclVersion",
    "Nic",
    "NodeType",
    "NvidiaSmiParseError",
    "NvlinkGeneration",
    "SystemFacts",
    "Topology",
    "TopologyError",
    "clear_shared_tables",
    "estimate_gang",
    "estimate_node",
    "from_status",
    "gpu_spec",
    "hop_gbps",
    "inter_node_bandwidth",
    "interconnect_class",
    "link_bandwidth_gbps",
    "load_node_type",
    "load_topology",
    "nearest_gpus",
    "nearest_nics",
    "nic_assignment",
    "nvlink_domain_size",
    "nvlink_domains",
    "nvlink_generation",
    "pair",
    "pair_allowed",
    "parse_nvidia_smi",
    "parse_nvidia_smi_all",
    "pcie_generation",
    "read_topology_text",
    "render_nvidia_smi",
    "to_status",
    "well_connected_groups",
    "with_gpu_model",
]
