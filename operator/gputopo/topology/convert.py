"""Between the topology model and the NodeTopology status of the API (``gputopo.api``)."""

from __future__ import annotations

from datetime import datetime

from gputopo.api.nodetopology import (
    GpuC2c,
    GpuFabric,
    GpuHealth,
    GpuStatus,
    LinkKind,
    LinkStatus,
    NicAffinity,
    NicStatus,
    NodeTopologyStatus,
    NvlinkDomain,
    NvlinkInfo,
    PcieInfo,
    ProbeInfo,
    SystemInfo,
)
from gputopo.topology.bandwidth import link_bandwidth_gbps
from gputopo.topology.fabric import HEALTH_SUMMARY_NAMES, fabric_health, node_domain
from gputopo.topology.model import PCIE_LEVELS, Fabric, Gpu, Link, Nic, SystemFacts, Topology, TopologyError

__all__ = ["from_status", "to_status"]

# NIC-to-GPU distances that keep a NIC on the GPU's own CPU (its NUMA node): P2C for a C2C-attached GPU.
_SAME_CPU = frozenset({LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE})


def _active_links(topology: Topology, gpu: int) -> int:
    """NVLinks of a GPU that carry traffic: its fabric links on NVSwitch, the sum of its pairs' otherwise."""
    switched = 0
    direct = 0
    for other in range(topology.gpu_count):
        if other == gpu:
            continue
        link = topology.link(gpu, other)
        if not link.usable_nvlink:
            continue
        if link.kind is LinkKind.NVSWITCH:
            switched = max(switched, link.nvlinks)
        else:
            direct += link.nvlinks
    return switched + direct


def _fabric_status(fabric: Fabric | None) -> GpuFabric | None:
    if fabric is None:
        return None
    health, reason = fabric_health(fabric)
    return GpuFabric(
        cluster_uuid=fabric.cluster_uuid,
        clique_id=fabric.clique_id,
        state=fabric.state,
        status=fabric.status,
        health_mask=fabric.health_mask,
        health_summary=HEALTH_SUMMARY_NAMES.get(fabric.health_summary, ""),
        clique=fabric.clique,
        health=health,
        reason=reason,
    )


def _fabric(status: GpuFabric | None) -> Fabric | None:
    if status is None:
        return None
    summaries = {name: value for value, name in HEALTH_SUMMARY_NAMES.items()}
    return Fabric(
        cluster_uuid=status.cluster_uuid,
        clique_id=status.clique_id,
        state=status.state,
        status=status.status,
        health_mask=status.health_mask,
        health_summary=summaries.get(status.health_summary, 0),
    )


def _own_cpu_nics(topology: Topology, gpu: int) -> list[str]:
    """The NICs on GPU ``gpu``'s own CPU: its NUMA node where both NUMA nodes are known, else no farther than NODE.

    On a Grace GPU these are the NICs NCCL reaches over C2C then PCIe (P2C); the other Grace's are SYS.
    """
    numa = topology.gpus[gpu].numa_node
    out = []
    for nic in topology.nics:
        if numa is not None and nic.numa_node is not None:
            same = nic.numa_node == numa
        else:
            same = nic.distance(gpu) in _SAME_CPU
        if same:
            out.append(nic.name)
    return out


def _c2c_status(topology: Topology, gpu: Gpu) -> GpuC2c | None:
    if not gpu.c2c:
        return None
    return GpuC2c(links=gpu.c2c_links, bandwidth_g_bps=gpu.c2c_gbps, nics=_own_cpu_nics(topology, gpu.index))


def _domain_status(topology: Topology) -> NvlinkDomain | None:
    """The node's NVLink domain, or None when no GPU reports fabric info at all."""
    if all(g.fabric is None for g in topology.gpus):
        return None
    domain = node_domain(topology)
    return NvlinkDomain(clique=domain.clique, health=domain.health, reason=domain.reason)


def to_status(
    topology: Topology,
    *,
    probe: ProbeInfo | None = None,
    observed_at: datetime | None = None,
) -> NodeTopologyStatus:
    """The NodeTopology status that describes the topology (links with their nominal GB/s per direction)."""
    gpus = [
        GpuStatus(
            index=g.index,
            uuid=g.uuid,
            model=g.model,
            architecture=g.architecture,
            memory_mi_b=g.memory_mib,
            pci_bus_id=g.pci_bus_id,
            numa_node=g.numa_node,
            pcie=PcieInfo(generation=g.pcie_generation, width=g.pcie_width),
            nvlink=NvlinkInfo(version=g.nvlink_version, active_links=_active_links(topology, g.index)),
            health=GpuHealth(state=g.health, reason=g.health_reason),
            fabric=_fabric_status(g.fabric),
            c2c=_c2c_status(topology, g),
        )
        for g in topology.gpus
    ]
    links = [
        LinkStatus(
            a=link.a,
            b=link.b,
            kind=link.kind,
            nvlinks=link.nvlinks,
            bandwidth_g_bps=round(
                link_bandwidth_gbps(topology.gpus[link.a], topology.gpus[link.b], link.kind, link.nvlinks), 4
            ),
            state=link.state,
        )
        for _, link in sorted(topology.links.items())
    ]
    nics = [
        NicStatus(
            name=nic.name,
            link_layer=nic.link_layer,
            state=nic.state,
            rate_gbps=nic.rate_gbps,
            numa_node=nic.numa_node,
            pci_bus_id=nic.pci_bus_id,
            gpu_affinity=[NicAffinity(gpu=g, kind=kind) for g, kind in enumerate(nic.affinity)],
            role=nic.role,
            default_route=nic.default_route,
        )
        for nic in topology.nics
    ]
    system = SystemInfo(
        driver_version=topology.system.driver_version,
        cuda_driver_version=topology.system.cuda_driver_version,
        gpu_direct_rdma=topology.system.gpudirect_rdma,
        nvswitch=topology.system.nvswitch,
        nvlink_domain=_domain_status(topology),
    )
    return NodeTopologyStatus(
        observed_at=observed_at,
        probe=probe or ProbeInfo(),
        system=system,
        gpus=gpus,
        links=links,
        nics=nics,
    )


def from_status(status: NodeTopologyStatus) -> Topology:
    """The topology a NodeTopology status describes.

    GPUs are ordered by index; a NIC's affinity to a GPU it does not list is SYS. A GPU's C2C NICs are not read
    back: they follow from the NICs' NUMA nodes and affinities. Raises ``TopologyError``
    when the status cannot be a topology (GPU indices not 0..n-1, a pair without a link, …).
    """
    ordered = sorted(status.gpus, key=lambda g: g.index)
    gpus = [
        Gpu(
            index=g.index,
            uuid=g.uuid,
            model=g.model,
            architecture=g.architecture,
            memory_mib=g.memory_mi_b,
            pci_bus_id=g.pci_bus_id,
            numa_node=g.numa_node,
            pcie_generation=g.pcie.generation,
            pcie_width=g.pcie.width,
            nvlink_version=g.nvlink.version,
            health=g.health.state,
            health_reason=g.health.reason,
            fabric=_fabric(g.fabric),
            c2c_links=g.c2c.links if g.c2c else 0,
            c2c_gbps=g.c2c.bandwidth_g_bps if g.c2c else 0.0,
        )
        for g in ordered
    ]
    n = len(gpus)
    links: list[Link] = []
    seen: set[tuple[int, int]] = set()
    for ls in status.links:
        key = (min(ls.a, ls.b), max(ls.a, ls.b))
        if key in seen:
            raise TopologyError(f"two links between GPU{key[0]} and GPU{key[1]}")
        seen.add(key)
        links.append(Link(ls.a, ls.b, ls.kind, ls.nvlinks, ls.state))
    nics = []
    for ns in status.nics:
        affinity = [LinkKind.SYS] * n
        for entry in ns.gpu_affinity:
            if not 0 <= entry.gpu < n:
                raise TopologyError(f"NIC {ns.name} names GPU{entry.gpu}, the node has {n} GPUs")
            if entry.kind not in PCIE_LEVELS:
                raise TopologyError(f"NIC {ns.name} reaches GPU{entry.gpu} by {entry.kind}, not a PCIe level")
            affinity[entry.gpu] = entry.kind
        nics.append(
            Nic(
                name=ns.name,
                link_layer=ns.link_layer,
                state=ns.state,
                rate_gbps=ns.rate_gbps,
                numa_node=ns.numa_node,
                pci_bus_id=ns.pci_bus_id,
                affinity=tuple(affinity) if n else (),
                role=ns.role,
                default_route=ns.default_route,
            )
        )
    system = SystemFacts(
        driver_version=status.system.driver_version,
        cuda_driver_version=status.system.cuda_driver_version,
        nvswitch=status.system.nvswitch,
        gpudirect_rdma=status.system.gpu_direct_rdma,
    )
    return Topology.build(gpus, links, nics, system)
