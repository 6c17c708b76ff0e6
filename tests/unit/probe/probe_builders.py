"""Builders of small topologies for the probe's tests, and where the shared fixtures are."""

from __future__ import annotations

__all__ = ["FIXTURES", "K", "fixture_files", "hgx", "pairs_board", "pcie_only"]

from pathlib import Path

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Gpu, Link, Nic, SystemFacts, Topology

K = LinkKind
FIXTURES = Path(__file__).resolve().parents[3] / "operator" / "gputopo" / "topology" / "fixtures" / "nvidia-smi"


def hgx(n: int = 8, links: int = 18, model: str = "NVIDIA H100 80GB HBM3", nics: bool = True) -> Topology:
    """An HGX board: every pair through NVSwitches, one NIC per GPU (PIX), two NUMA nodes."""
    half = n // 2
    gpus = [Gpu(i, model=model, numa_node=0 if i < half else 1) for i in range(n)]
    pairs = [Link(a, b, K.NVSWITCH, nvlinks=links) for a in range(n) for b in range(a + 1, n)]
    nic_list = [
        Nic(
            f"mlx5_{j}",
            rate_gbps=400,
            numa_node=0 if j < half else 1,
            affinity=tuple(K.PIX if i == j else K.NODE if (i < half) == (j < half) else K.SYS for i in range(n)),
        )
        for j in range(n if nics else 0)
    ]
    return Topology.build(gpus, pairs, nic_list, SystemFacts(gpudirect_rdma=True, nvswitch=True))


def pairs_board(n: int = 4, nvlinks: int = 4) -> Topology:
    """PCIe cards with NVLink bridges on pairs (0-1, 2-3 …), PHB otherwise, one RoCE NIC near GPU0."""
    gpus = [Gpu(i, model="NVIDIA A100 80GB PCIe", numa_node=0) for i in range(n)]
    links = [
        Link(a, b, K.NVLINK, nvlinks=nvlinks) if b == a + 1 and a % 2 == 0 else Link(a, b, K.PHB)
        for a in range(n)
        for b in range(a + 1, n)
    ]
    nic = Nic("mlx5_0", link_layer="Ethernet", rate_gbps=100, numa_node=0, affinity=(K.PIX,) + (K.PHB,) * (n - 1))
    return Topology.build(gpus, links, [nic])


def pcie_only(n: int = 4) -> Topology:
    gpus = [Gpu(i, model="NVIDIA L40S", numa_node=0) for i in range(n)]
    return Topology.build(gpus, [Link(a, b, K.NODE) for a in range(n) for b in range(a + 1, n)])


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.txt"))
