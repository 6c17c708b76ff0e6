"""Node types the cluster generator and the tests use, transcribed from the shared ``nvidia-smi topo -m``
fixtures (one shared ``Topology`` object per type, so identical nodes fall into one node class).

A stopgap until ``gputopo.topology.catalog`` lands; the names match its node types.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Gpu, Link, Nic, SystemFacts, Topology

__all__ = ["NODE_TYPES", "load_node_type"]

_DGX1_NVLINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
    (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,
}  # fmt: skip


def _socket_level(a: int, b: int, per_socket: int = 4) -> LinkKind:
    return LinkKind.NODE if a // per_socket == b // per_socket else LinkKind.SYS


def _gpus(model: str, nvlink_version: int, pcie_gen: int, n: int = 8) -> list[Gpu]:
    return [
        Gpu(i, uuid=f"GPU-{model}-{i}", model=model, numa_node=i // (n // 2), pcie_generation=pcie_gen,
            pcie_width=16, nvlink_version=nvlink_version)
        for i in range(n)
    ]  # fmt: skip


def _nvswitch(model: str, nvlinks: int, version: int, gen: int, nics: list[Nic], driver: str) -> Topology:
    links = [Link(a, b, LinkKind.NVSWITCH, nvlinks) for a in range(8) for b in range(a + 1, 8)]
    return Topology.build(_gpus(model, version, gen), links, nics, SystemFacts(driver, nvswitch=True))


def _hgx_h100() -> Topology:
    nics = [
        Nic(f"mlx5_{j}", rate_gbps=400, affinity=tuple(LinkKind.PIX if g == j else _socket_level(g, j)
                                                       for g in range(8)))
        for j in range(8)
    ]  # fmt: skip
    return _nvswitch("NVIDIA H100 80GB HBM3", 18, 4, 5, nics, "570.133.20")


def _a100_nics(layer: str) -> list[Nic]:
    return [
        Nic(f"mlx5_{j}", link_layer=layer, rate_gbps=200,
            affinity=tuple(LinkKind.PXB if g // 2 == j // 2 else LinkKind.SYS for g in range(8)))
        for j in range(8)
    ]  # fmt: skip


def _dgx_a100() -> Topology:
    return _nvswitch("NVIDIA A100-SXM4-80GB", 12, 3, 4, _a100_nics("InfiniBand"), "535.104.05")


def _hgx_a100() -> Topology:
    return _nvswitch("NVIDIA A100-SXM4-40GB", 12, 3, 4, _a100_nics("Ethernet"), "535.104.05")


def _h100_nvl_pairs() -> Topology:
    links = [
        Link(a, b, LinkKind.NVLINK, 12) if a // 2 == b // 2 else Link(a, b, _socket_level(a, b))
        for a in range(8)
        for b in range(a + 1, 8)
    ]
    affinity = tuple(LinkKind.PHB if g == 1 else _socket_level(g, 0) for g in range(8))
    nics = [Nic(f"mlx5_{j}", rate_gbps=400, affinity=affinity) for j in range(2)]
    return Topology.build(_gpus("NVIDIA H100 NVL", 4, 5), links, nics, SystemFacts("570.158.01"))


def _dgx1_v100() -> Topology:
    links = [
        Link(a, b, LinkKind.NVLINK, _DGX1_NVLINKS[(a, b)]) if (a, b) in _DGX1_NVLINKS else Link(a, b, LinkKind.SYS)
        for a in range(8)
        for b in range(a + 1, 8)
    ]
    nics = []
    for j, (near, far) in enumerate([((0, 1), (2, 3)), ((2, 3), (0, 1)), ((4, 5), (6, 7)), ((6, 7), (4, 5))]):
        affinity = tuple(LinkKind.PIX if g in near else LinkKind.PHB if g in far else LinkKind.SYS for g in range(8))
        nics.append(Nic(f"mlx5_{j}", rate_gbps=100, affinity=affinity))
    return Topology.build(_gpus("Tesla V100-SXM2-32GB", 2, 3), links, nics, SystemFacts("470.82.01"))


def _pcie_only(model: str, gen: int, nic_gpu: int) -> Topology:
    links = [Link(a, b, LinkKind.SYS) for a in range(8) for b in range(a + 1, 8)]
    affinity = tuple(LinkKind.PHB if g == nic_gpu else LinkKind.SYS for g in range(8))
    nics = [Nic(f"mlx5_{j}", link_layer="Ethernet", rate_gbps=100, affinity=affinity) for j in range(2)]
    return Topology.build(_gpus(model, 0, gen), links, nics, SystemFacts("550.54.14"))


def _rtx4090_pcie() -> Topology:
    return _pcie_only("NVIDIA GeForce RTX 4090", 4, 6)


NODE_TYPES: dict[str, Callable[[], Topology]] = {
    "hgx-h100": _hgx_h100,
    "dgx-a100": _dgx_a100,
    "hgx-a100": _hgx_a100,
    "h100-nvl-pairs": _h100_nvl_pairs,
    "dgx1-v100": _dgx1_v100,
    "rtx4090-pcie": _rtx4090_pcie,
}


@cache
def load_node_type(name: str) -> Topology:
    """The shared topology of a node type (one object per name)."""
    try:
        return NODE_TYPES[name]()
    except KeyError:
        raise KeyError(f"unknown node type {name!r}; known: {', '.join(NODE_TYPES)}") from None
