"""Grace nodes as NVML and sysfs show them: a GPU's NVLink-C2C to its Grace, compute rails, storage and
front-end ports. Fake node types for the probe's tests and the sandbox (``gh200``, ``gb200``, ``gb300``).

No ``nvidia-smi topo -m`` of these says what the probe reads (C2C is not in the matrix, and every NIC is
NODE or SYS), so they are built from the hardware descriptions in shared/reference/grace-blackwell.md and
dra-and-mnnvl.md (B3). Each NIC sits on one Grace's NUMA node: NODE to that Grace's GPUs, SYS to the other's.
C2C figures: GB300's is a posted NCCL topology dump (``<c2c bw="44712" count="5"/>``); GH200's is NVIDIA's
900 GB/s NVLink-C2C; GB200's is that 900 GB/s shared by the superchip's two GPUs *[not a posted reading]*.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType

from gputopo.api.nodetopology import LinkKind, NicRole
from gputopo.topology.model import Gpu, Link, Nic, SystemFacts, Topology

__all__ = ["GRACE_NODE_TYPES", "gb200", "gb300", "gh200", "load_grace_node_type"]

_IB, _ETH = "InfiniBand", "Ethernet"


def _nic(
    name: str,
    grace: int,
    gpus: int,
    *,
    rate: float,
    layer: str = _IB,
    role: NicRole = NicRole.COMPUTE,
    default_route: bool = False,
) -> Nic:
    per_grace = max(1, gpus // 2)
    affinity = tuple(LinkKind.NODE if g // per_grace == grace else LinkKind.SYS for g in range(gpus))
    return Nic(
        name,
        link_layer=layer,
        rate_gbps=rate,
        numa_node=grace,
        affinity=affinity,
        role=role,
        default_route=default_route,
    )


def _tray(model: str, memory_mib: int, c2c_links: int, c2c_gbps: float, nics: list[Nic]) -> Topology:
    """Four Blackwell GPUs, two per Grace, every pair through the rack's NVLink switch trays (NV18)."""
    gpus = [
        Gpu(
            i,
            model=model,
            architecture="Blackwell",
            memory_mib=memory_mib,
            numa_node=i // 2,
            pcie_generation=5,
            pcie_width=16,
            nvlink_version=5,
            c2c_links=c2c_links,
            c2c_gbps=c2c_gbps,
        )
        for i in range(4)
    ]
    links = [Link(a, b, LinkKind.NVSWITCH, 18) for a in range(4) for b in range(a + 1, 4)]
    return Topology.build(gpus, links, nics, SystemFacts(nvswitch=True, gpudirect_rdma=True))


def gh200() -> Topology:
    """GH200: one Hopper GPU on one Grace over C2C (900 GB/s); two dual-port BlueField-3 as four equidistant
    200 Gb/s InfiniBand rails (NVIDIA/nccl#1579: 4 x 200 Gb/s per GH200), and an Ethernet front-end port."""
    gpu = Gpu(
        0,
        model="NVIDIA GH200 480GB",
        architecture="Hopper",
        memory_mib=97871,
        numa_node=0,
        pcie_generation=5,
        pcie_width=16,
        c2c_links=10,
        c2c_gbps=900.0,
    )
    nics = [_nic(f"mlx5_{i}", 0, 1, rate=200) for i in range(4)]
    nics.append(_nic("mlx5_4", 0, 1, rate=100, layer=_ETH, role=NicRole.FRONT_END, default_route=True))
    return Topology.build([gpu], [], nics, SystemFacts(gpudirect_rdma=True))


def gb200() -> Topology:
    """GB200 NVL72 compute tray: 4 ConnectX-7 400 Gb/s InfiniBand rails, two per Grace (DGX GB200 User Guide,
    "Hardware"); an Ethernet front-end port with the default route on the first Grace and an Ethernet storage
    port on the second."""
    nics = [_nic(f"mlx5_{i}", i // 2, 4, rate=400) for i in range(4)]
    nics.append(_nic("mlx5_4", 0, 4, rate=200, layer=_ETH, role=NicRole.FRONT_END, default_route=True))
    nics.append(_nic("mlx5_5", 1, 4, rate=200, layer=_ETH, role=NicRole.STORAGE))
    return _tray("NVIDIA GB200", 186 * 1024, 10, 450.0, nics)


def gb300() -> Topology:
    """GB300 NVL72 compute tray: 4 ConnectX-8 800 Gb/s InfiniBand rails, two per Grace (NVIDIA Enterprise RA);
    a front-end port with the default route, and a BlueField-3's Ethernet port (in-band management)."""
    nics = [_nic(f"mlx5_{i}", i // 2, 4, rate=800) for i in range(4)]
    nics.append(_nic("mlx5_4", 0, 4, rate=200, layer=_ETH, role=NicRole.FRONT_END, default_route=True))
    nics.append(_nic("mlx5_5", 1, 4, rate=200, layer=_ETH, role=NicRole.FRONT_END))
    return _tray("NVIDIA GB300", 288 * 1024, 5, 44712 * 5 / 1000, nics)


GRACE_NODE_TYPES: Mapping[str, Callable[[], Topology]] = MappingProxyType(
    {"gh200": gh200, "gb200": gb200, "gb300": gb300}
)


@cache
def load_grace_node_type(name: str) -> Topology:
    """One shared topology per name; ``KeyError`` for a name that is not a Grace node type."""
    return GRACE_NODE_TYPES[name]()
