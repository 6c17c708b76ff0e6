"""Node types for the sandbox, the simulator and the tests, built from a real ``nvidia-smi topo -m`` where one
was posted (every type but the GB200 tray, which is built from NVIDIA's hardware description).

The fixtures under ``fixtures/nvidia-smi/`` are copies of ``shared/fixtures/topology/nvidia-smi/`` (their
first two lines say where each was posted and what the machine is). The text names neither the GPU nor
the NICs' rates, so each node type adds them; what a type adds that the posted text does not show (NIC
rate, link layer, driver) comes from the fixture's ``# system:`` line where it says so, else is a typical
figure for that machine, marked below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.bandwidth import gpu_spec
from gputopo.topology.model import Gpu, Link, Nic, SystemFacts, Topology
from gputopo.topology.nvidia_smi import parse_nvidia_smi_all

__all__ = [
    "GB200_TRAY",
    "NODE_TYPES",
    "NodeType",
    "calibration_text",
    "fixture_text",
    "load_node_type",
    "nvl72_calibration_text",
]


@dataclass(frozen=True, slots=True)
class NodeType:
    """A kind of GPU node: which fixture it comes from (none for a built type) and what the fixture does not say."""

    name: str
    fixture: str
    gpu_model: str
    nic_rate_gbps: float
    description: str
    link_layer: str = "InfiniBand"
    gpudirect_rdma: bool = True
    driver_version: str = ""
    memory_mib: int = 0
    block: int = 0  # which matrix of the fixture (one file holds two)


def _types(*types: NodeType) -> Mapping[str, NodeType]:
    return MappingProxyType({t.name: t for t in types})


GB200_TRAY = "gb200-tray"

NODE_TYPES: Mapping[str, NodeType] = _types(
    NodeType(
        GB200_TRAY,
        "",
        "NVIDIA GB200",
        400.0,  # 4x ConnectX-7 single-port 400G OSFP per tray (DGX GB200 User Guide, "Hardware")
        "GB200 NVL72 compute tray: 4x B200 on the rack's NVSwitch fabric (NV18), 4 NICs of 400G, 2 Grace NUMA nodes",
        memory_mib=186 * 1024,  # "GB200-186GB" (MLCommons inference v6.1 system description)
    ),
    NodeType(
        "p6e-gb200",
        "gb200-aws-4gpu-gpu-only-numa-0-1.txt",
        "NVIDIA GB200",
        400.0,  # EFA (not listed in the matrix, so the node has no NIC here)
        "AWS P6e-GB200 tray: 4x GB200 on the rack's NVSwitch fabric (NV18), 2 Graces; its EFA NICs are not in "
        "the matrix",
        link_layer="Ethernet",
        memory_mib=186 * 1024,
    ),
    NodeType(
        "azure-h100-pair-no-nvlink",
        "azure-nc80adis-h100-v5-2gpu-nvlink-missing.txt",
        "NVIDIA H100 NVL",
        400.0,  # not in the posting
        "Azure NC80adis H100 v5 VM booted without its NVLink: 2x H100 NVL, SYS between them, 1 NIC",
        memory_mib=95830,
    ),
    NodeType(
        "hgx-h100",
        "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt",
        "NVIDIA H100 80GB HBM3",
        400.0,
        "HGX/DGX H100: 8x H100 SXM on NVSwitch (NV18), 8 NICs one per GPU (PIX), 2 NUMA nodes",
        driver_version="570.133.20",
        memory_mib=81559,
    ),
    NodeType(
        "dgx-a100",
        "dgx-a100-8gpu-nv12-10xmlx5.txt",
        "NVIDIA A100-SXM4-80GB",
        200.0,  # HDR InfiniBand
        "DGX A100: 8x A100 SXM4 on NVSwitch (NV12), 8 compute + 2 storage HCAs, NPS4",
        memory_mib=81920,
    ),
    NodeType(
        "hgx-a100",
        "hgx-a100-8gpu-nv12-8xmlx5-roce.txt",
        "NVIDIA A100-SXM4-80GB",
        100.0,  # "8x mlx5 ConnectX RoCE NICs 100 Gb/s"
        "HGX A100: 8x A100 SXM4 on NVSwitch (NV12), 8 RoCE NICs (PXB to GPU pairs)",
        link_layer="Ethernet",
        driver_version="525.105.17",
        memory_mib=81920,
    ),
    NodeType(
        "h100-nvl-pairs",
        "8xH100-NVL-pcie-nvlink-bridge-pairs-nv12.txt",
        "NVIDIA H100 NVL",
        400.0,  # not in the posting: a ConnectX-7 figure
        "8x H100 NVL PCIe cards, NVLink bridge pairs (NV12), NODE within a socket, SYS across; 2 NICs",
        driver_version="570.158.01",
        memory_mib=95830,
    ),
    NodeType(
        "dgx1-v100",
        "dgx1-v100-8gpu-cubemesh-4xmlx5.txt",
        "Tesla V100-SXM2-32GB",
        100.0,  # EDR InfiniBand
        "DGX-1: 8x V100 SXM2 in a hybrid cube-mesh (NV1/NV2), 4 HCAs behind PCIe switches",
        memory_mib=32768,
    ),
    NodeType(
        "c4140-v100",
        "dell-c4140-4xV100-sxm2-nv2-mlx5.txt",
        "Tesla V100-SXM2-16GB",
        100.0,  # EDR InfiniBand
        "Dell C4140: 4x V100 SXM2 all-to-all NVLink (NV2), 1 HCA",
        memory_mib=16384,
    ),
    NodeType(
        "a100-polaris",
        "alcf-polaris-4xA100-nv4-2xmlx5.txt",
        "NVIDIA A100-SXM4-40GB",
        200.0,  # not in the posting: HDR/200G class
        "ALCF Polaris: 4x A100 SXM4 all-to-all NVLink (NV4), one NUMA domain per GPU, 2 NICs",
        memory_mib=40960,
    ),
    NodeType(
        "p4d-a100",
        "aws-p4d.24xlarge-8xA100-nv12.txt",
        "NVIDIA A100-SXM4-40GB",
        100.0,  # EFA (not listed in the matrix, so the node has no NIC here)
        "AWS p4d.24xlarge: 8x A100 SXM4 on NVSwitch (NV12); its EFA NICs are not in the matrix",
        link_layer="Ethernet",
        memory_mib=40960,
    ),
    NodeType(
        "rtx4090-pcie",
        "8xRTX4090-pcie-dual-socket-all-sys.txt",
        "NVIDIA GeForce RTX 4090",
        100.0,  # not in the posting
        "8x GeForce RTX 4090, PCIe only, every pair SYS, 2 NICs near GPU6",
        link_layer="Ethernet",
        gpudirect_rdma=False,
        memory_mib=24564,
    ),
    NodeType(
        "l40s-pcie",
        "aws-g6e.12xlarge-4xL40S-pcie-node.txt",
        "NVIDIA L40S",
        100.0,  # g6e.12xlarge network; no NIC in the matrix
        "AWS g6e.12xlarge: 4x L40S, PCIe only, every pair NODE, one NUMA node",
        link_layer="Ethernet",
        gpudirect_rdma=False,
        memory_mib=46068,
    ),
    NodeType(
        "rtx3090-nvlink",
        "2xRTX3090-nvlink-bridge-NV4.txt",
        "NVIDIA GeForce RTX 3090",
        10.0,  # a workstation's Ethernet; no NIC in the matrix
        "Workstation: 2x GeForce RTX 3090 with an NVLink bridge (GA102, NV4)",
        link_layer="Ethernet",
        gpudirect_rdma=False,
        driver_version="560.35.05",
        memory_mib=24576,
    ),
    NodeType(
        "titanrtx-nvlink",
        "2xTITANRTX-nvlink-NV2-and-PHB.txt",
        "NVIDIA TITAN RTX",
        10.0,
        "Workstation: 2x TITAN RTX with an NVLink bridge (NV2)",
        link_layer="Ethernet",
        gpudirect_rdma=False,
        memory_mib=24576,
    ),
    NodeType(
        "titanrtx-pcie",
        "2xTITANRTX-nvlink-NV2-and-PHB.txt",
        "NVIDIA TITAN RTX",
        10.0,
        "The same workstation without the bridge: 2x TITAN RTX over PCIe (PHB)",
        link_layer="Ethernet",
        gpudirect_rdma=False,
        memory_mib=24576,
        block=1,
    ),
)


def _fixtures() -> Traversable:
    return resources.files("gputopo.topology").joinpath("fixtures")


def fixture_text(name: str) -> str:
    """The text of one shipped fixture (``name`` is its file name), provenance lines included."""
    return _fixtures().joinpath("nvidia-smi", name).read_text(encoding="utf-8")


def nvl72_calibration_text() -> str:
    """Published GB200 NVL72 nccl-tests bus bandwidths (shared/reference/dra-and-mnnvl.md B4, with sources)."""
    return _fixtures().joinpath("nvl72-busbw-calibration.tsv").read_text(encoding="utf-8")


def calibration_text() -> str:
    """The nccl-tests bus bandwidth calibration table: shared/fixtures/nccl-busbw-calibration.tsv's rows, then
    the Blackwell rows added here (19 on), each with its source."""
    return _fixtures().joinpath("nccl-busbw-calibration.tsv").read_text(encoding="utf-8")


def _gb200_tray(node_type: NodeType) -> Topology:
    """A GB200 NVL72 compute tray (no posted ``nvidia-smi topo -m`` to read, so built from the hardware facts).

    DGX GB200 User Guide "Hardware": 2 Grace CPUs and 4 Blackwell GPUs per 1RU tray, 4 ConnectX-7 400G ports
    for the east-west network. ``nvidia-smi topo -m`` shows NV18 between the tray's GPUs (MLCommons inference
    v6.1, Crusoe ``GB200-NVL72_GB200-186GB_aarch64x16_Dynamo.json``): all NVLink goes through the rack's switch
    trays, so every pair is an NVSwitch link. GPUs 0-1 reach the first Grace over NVLink-C2C, 2-3 the second,
    and two NICs hang off each Grace's PCIe. ``nvidia-smi topo -m`` prints every GPU-NIC cell of a GB200 tray
    as SYS (the sglang fixture), so the NICs carry their Grace's NUMA node: NCCL reaches them by P2C (C2C then
    PHB) with GPUDirect RDMA from 2.27.3, which the 3-rack ring figure of NVIDIA/nccl#1801 (196.7 GB/s over
    4 such NICs, NCCL 2.27.3) bears out.
    """
    spec = gpu_spec(node_type.gpu_model)
    pcie = spec.pcie_generation if spec is not None else 0
    nvlinks = spec.nvlinks if spec is not None else 18
    c2c_links = spec.c2c_links if spec is not None else 0
    gpus = [
        Gpu(
            i,
            model=node_type.gpu_model,
            architecture="Blackwell",
            memory_mib=node_type.memory_mib,
            numa_node=i // 2,
            pcie_generation=pcie,
            pcie_width=16,
            nvlink_version=5,
            c2c_links=c2c_links,
        )
        for i in range(4)
    ]
    links = [Link(a, b, LinkKind.NVSWITCH, nvlinks) for a in range(4) for b in range(a + 1, 4)]
    nics = [
        Nic(
            f"mlx5_{i}",
            link_layer=node_type.link_layer,
            rate_gbps=node_type.nic_rate_gbps,
            numa_node=i // 2,
            affinity=(LinkKind.SYS,) * 4,
        )
        for i in range(4)
    ]
    system = SystemFacts(driver_version=node_type.driver_version, nvswitch=True, gpudirect_rdma=True)
    return Topology.build(gpus, links, nics, system)


@cache
def load_node_type(name: str) -> Topology:
    """The topology of a node type; one shared object per name, so equal nodes share their caches."""
    try:
        node_type = NODE_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown node type {name!r}; known: {', '.join(NODE_TYPES)}") from None
    if not node_type.fixture:
        return _gb200_tray(node_type)
    topology = parse_nvidia_smi_all(fixture_text(node_type.fixture), gpu_model=node_type.gpu_model)[node_type.block]
    spec = gpu_spec(node_type.gpu_model)
    pcie = spec.pcie_generation if spec is not None else 0
    gpus = tuple(
        replace(g, memory_mib=node_type.memory_mib, pcie_generation=pcie, pcie_width=16) for g in topology.gpus
    )
    nics = tuple(replace(n, rate_gbps=node_type.nic_rate_gbps, link_layer=node_type.link_layer) for n in topology.nics)
    system = SystemFacts(
        driver_version=node_type.driver_version,
        nvswitch=topology.system.nvswitch,
        gpudirect_rdma=node_type.gpudirect_rdma and bool(nics),
    )
    return Topology(gpus, topology.links, nics, system)
