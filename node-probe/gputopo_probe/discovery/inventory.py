"""``discover``: one pass over NVML and sysfs that yields the node's static topology and what health polls need."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gputopo.api.nodetopology import LinkKind, NicState
from gputopo.topology.model import PCIE_LEVELS, Gpu, Link, Nic, Topology, pair
from gputopo_probe.discovery.gpus import read_gpu, read_system
from gputopo_probe.discovery.nvlink import NvlinkPort, links_to, read_ports, switch_links
from gputopo_probe.discovery.sysfs import NicPort, Sysfs
from gputopo_probe.errors import NvmlError
from gputopo_probe.nvml import (
    NVML_LEVEL_KIND,
    P2P_CAPS_INDEX_NVLINK,
    P2P_CAPS_INDEX_READ,
    Nvml,
    normalise_bus_id,
)
from gputopo_probe.pcie import PciPath, pcie_distance
from gputopo_probe.roles import BLUEFIELD_PCI_IDS, NicFacts, NicRoleRules, nic_roles

__all__ = ["Inventory", "NvlinkPort", "discover"]

_P2P_OK = 0
_RDMA_LINK_LAYERS = ("InfiniBand", "Ethernet", "")  # '': sysfs does not say; kept, with no role


@dataclass
class Inventory:
    """What discovery found: the topology with every link Up, and the handles and ports health polls read."""

    topology: Topology
    handles: list[Any]
    architectures: list[int | None]
    ports: list[list[NvlinkPort]]
    nic_ports: list[NicPort]
    p2p_checked: dict[tuple[int, int], int] = field(default_factory=dict)
    """Pairs whose P2P status read OK at discovery, with the P2P index to re-read in health polls."""
    switch_ports: list[list[int]] = field(init=False)
    """Per GPU, its links to NVSwitches."""
    peer_ports: dict[tuple[int, int], list[int]] = field(init=False)
    """Per (GPU, peer GPU), the GPU's links to that peer."""

    def __post_init__(self) -> None:
        self.switch_ports = [[p.link for p in ports if p.switch] for ports in self.ports]
        self.peer_ports = {}
        for gpu, ports in enumerate(self.ports):
            for p in ports:
                if p.peer is not None:
                    self.peer_ports.setdefault((gpu, p.peer), []).append(p.link)


def _pcie_level(nvml: Nvml, ha: Any, hb: Any) -> LinkKind:
    level = nvml.optional("nvmlDeviceGetTopologyCommonAncestor", ha, hb, default=None)
    return NVML_LEVEL_KIND.get(int(level), LinkKind.SYS) if level is not None else LinkKind.SYS


def _p2p_ok(nvml: Nvml, ha: Any, hb: Any, index: int) -> bool:
    status = nvml.optional("nvmlDeviceGetP2PStatus", ha, hb, index, default=None)
    return status == _P2P_OK


def _facts(port: NicPort, gpu_paths: list[PciPath | None], routes: frozenset[str] | None) -> NicFacts:
    known = [pcie_distance(port.pci, g) for g in gpu_paths if port.pci and g]
    return NicFacts(
        name=port.name,
        link_layer=port.link_layer,
        numa_node=port.pci.numa_node if port.pci else None,
        default_route=None if routes is None else any(d in routes for d in port.netdevs),
        nearest_gpu=min(known, key=PCIE_LEVELS.index) if known else None,
        bluefield=port.pci_id in BLUEFIELD_PCI_IDS,
    )


def _gpu_path(sysfs: Sysfs, gpu: Gpu) -> PciPath | None:
    """The GPU's PCI path at its CPU's NUMA node, which sysfs may not give (-1 on Grace, or the GPU memory's)."""
    path = sysfs.pci_path(gpu.pci_bus_id) if gpu.pci_bus_id else None
    return replace(path, numa_node=gpu.numa_node) if path and gpu.numa_node is not None else path


def _nics(sysfs: Sysfs, ports: list[NicPort], gpus: list[Gpu], rules: NicRoleRules | None) -> list[Nic]:
    gpu_paths = [_gpu_path(sysfs, g) for g in gpus]
    routes = sysfs.default_route_devices()
    facts = [_facts(p, gpu_paths, routes) for p in ports]
    roles = nic_roles(facts, (g.numa_node for g in gpus), rules)
    return [
        Nic(
            name=port.name,
            link_layer=port.link_layer,
            state=NicState.UP if port.active else NicState.DOWN,
            rate_gbps=port.rate_gbps,
            numa_node=fact.numa_node,
            pci_bus_id=port.pci.device if port.pci else "",
            affinity=tuple(pcie_distance(port.pci, g) if port.pci and g else LinkKind.SYS for g in gpu_paths),
            role=roles[port.name],
            default_route=bool(fact.default_route),
        )
        for port, fact in zip(ports, facts, strict=True)
    ]


def discover(nvml: Nvml, sysfs: Sysfs, nic_rules: NicRoleRules | None = None) -> Inventory:
    """Walk NVML and sysfs once. Raises ``NvmlError`` only when NVML itself is unusable.

    ``nic_rules`` name NICs' roles where the cluster's operator set them (``gputopo_probe.roles``)."""
    count = int(nvml.call("nvmlDeviceGetCount"))
    handles = [nvml.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    bus_ids = [normalise_bus_id(nvml.call("nvmlDeviceGetPciInfo", h).busId) for h in handles]
    gpu_by_bus = {bus: i for i, bus in enumerate(bus_ids) if bus}
    architectures: list[int | None] = []
    ports: list[list[NvlinkPort]] = []
    for i, h in enumerate(handles):
        arch = nvml.optional("nvmlDeviceGetArchitecture", h, default=None)
        architectures.append(int(arch) if isinstance(arch, int) else None)
        try:
            ports.append(read_ports(nvml, sysfs, i, h, architectures[-1], gpu_by_bus))
        except NvmlError:
            ports.append([])
    gpus = [read_gpu(nvml, sysfs, i, h, max((p.version for p in ports[i]), default=0)) for i, h in enumerate(handles)]

    links: list[Link] = []
    p2p_checked: dict[tuple[int, int], int] = {}
    switched = [switch_links(p) for p in ports]
    direct = [links_to(p) for p in ports]
    for a in range(count):
        for b in range(a + 1, count):
            key = pair(a, b)
            nvlinks = max(direct[a][b], direct[b][a])
            if switched[a] and switched[b]:
                links.append(Link(a, b, LinkKind.NVSWITCH, nvlinks=min(switched[a], switched[b])))
                index = P2P_CAPS_INDEX_NVLINK
            elif nvlinks:
                links.append(Link(a, b, LinkKind.NVLINK, nvlinks=nvlinks))
                index = P2P_CAPS_INDEX_NVLINK
            else:
                level = _pcie_level(nvml, handles[a], handles[b])
                links.append(Link(a, b, level if level in PCIE_LEVELS else LinkKind.SYS))
                index = P2P_CAPS_INDEX_READ
            if _p2p_ok(nvml, handles[a], handles[b], index):
                p2p_checked[key] = index

    nic_ports = [
        p for p in (sysfs.nic_port(name) for name in sysfs.nic_names()) if p and p.link_layer in _RDMA_LINK_LAYERS
    ]
    nics = _nics(sysfs, nic_ports, gpus, nic_rules)
    system = read_system(nvml, nvswitch=any(switched), gpudirect_rdma=sysfs.gpudirect_rdma())
    topology = Topology.build(gpus, links, nics, system)
    return Inventory(topology, handles, architectures, ports, nic_ports, p2p_checked)
