"""The NodeTopology status the probe publishes: the topology with its health, plus what only the probe knows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gputopo.api.conditions import Condition
from gputopo.api.nodetopology import (
    GpuHealth,
    GpuHealthState,
    GpuStatus,
    LinkState,
    LinkStatus,
    NicAffinity,
    NicState,
    NicStatus,
    NodeTopologyStatus,
    NvlinkInfo,
    PcieInfo,
    PodGpus,
    ProbeInfo,
    SystemInfo,
)
from gputopo.topology.model import Topology
from gputopo_probe import __version__
from gputopo_probe.health.monitor import GpuDetail

__all__ = ["build_status", "node_health", "topology_status"]


def topology_status(topology: Topology) -> NodeTopologyStatus:
    """The topology part, through the shared converter of ``gputopo.topology`` when it is there."""
    try:
        from gputopo.topology import to_status  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return _to_status(topology)
    status: NodeTopologyStatus = to_status(topology)
    return status


# Used only until gputopo.topology.to_status exists: GB/s per NVLink by generation, and per PCIe level.
_PER_NVLINK = {1: 40.0, 2: 50.0, 3: 50.0, 4: 50.0, 5: 100.0, 6: 200.0}
_PCIE = {"PIX": 24.0, "PXB": 22.0, "PHB": 20.0, "NODE": 18.0, "SYS": 12.0}


def _to_status(topology: Topology) -> NodeTopologyStatus:
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
            nvlink=NvlinkInfo(version=g.nvlink_version),
            health=GpuHealth(state=g.health, reason=g.health_reason),
        )
        for g in topology.gpus
    ]
    links = []
    for (a, b), link in sorted(topology.links.items()):
        if link.is_nvlink:
            version = topology.gpus[a].nvlink_version or 3
            bandwidth = link.nvlinks * _PER_NVLINK.get(version, 50.0) if link.usable_nvlink else 0.0
        else:
            bandwidth = _PCIE.get(link.kind.value, 12.0) if link.state is not LinkState.DOWN else 0.0
        links.append(
            LinkStatus(a=a, b=b, kind=link.kind, nvlinks=link.nvlinks, bandwidth_g_bps=bandwidth, state=link.state)
        )
    nics = [
        NicStatus(
            name=n.name,
            link_layer=n.link_layer,
            state=n.state,
            rate_gbps=n.rate_gbps,
            numa_node=n.numa_node,
            pci_bus_id=n.pci_bus_id,
            gpu_affinity=[NicAffinity(gpu=i, kind=k) for i, k in enumerate(n.affinity)],
        )
        for n in topology.nics
    ]
    system = SystemInfo(
        driver_version=topology.system.driver_version,
        cuda_driver_version=topology.system.cuda_driver_version,
        gpu_direct_rdma=topology.system.gpudirect_rdma,
        nvswitch=topology.system.nvswitch,
    )
    return NodeTopologyStatus(system=system, gpus=gpus, links=links, nics=nics)


def node_health(topology: Topology) -> str:
    """``healthy``, ``degraded`` or ``unhealthy``: the summary label value."""
    if any(g.health is GpuHealthState.UNHEALTHY for g in topology.gpus):
        return "unhealthy"
    if (
        any(g.health is GpuHealthState.DEGRADED for g in topology.gpus)
        or any(link.state is not LinkState.UP for link in topology.links.values())
        or any(n.state is NicState.DOWN for n in topology.nics)
    ):
        return "degraded"
    return "healthy"


def build_status(
    topology: Topology,
    details: Sequence[GpuDetail],
    *,
    backend: str,
    observed_at: datetime,
    pods: Sequence[PodGpus] = (),
) -> NodeTopologyStatus:
    status = topology_status(topology)
    gpus: list[GpuStatus] = []
    for gpu_status, gpu in zip(status.gpus, topology.gpus, strict=True):
        detail = details[gpu.index] if gpu.index < len(details) else GpuDetail()
        health = GpuHealth(
            state=gpu.health,
            temperature_c=detail.temperature_c,
            throttle_reasons=list(detail.throttle_reasons),
            xid=detail.xid,
            reason=gpu.health_reason,
        )
        nvlink = NvlinkInfo(version=gpu.nvlink_version, active_links=detail.active_links)
        gpus.append(gpu_status.model_copy(update={"health": health, "nvlink": nvlink}))
    summary = node_health(topology)
    ready = Condition(
        type="Healthy",
        status="True" if summary == "healthy" else "False",
        reason=summary.capitalize(),
        message="" if summary == "healthy" else _summary(topology),
    )
    return status.model_copy(
        update={
            "gpus": gpus,
            "observed_at": observed_at,
            "probe": ProbeInfo(version=__version__, backend=backend),
            "pods": list(pods),
            "conditions": [ready],
        }
    )


def _summary(topology: Topology) -> str:
    parts = [
        f"GPU{g.index} {g.health.value}: {g.health_reason}"
        for g in topology.gpus
        if g.health is not GpuHealthState.HEALTHY
    ]
    parts += [
        f"link {a}-{b} {link.state.value}"
        for (a, b), link in sorted(topology.links.items())
        if link.state is not LinkState.UP
    ]
    parts += [f"NIC {n.name} Down" for n in topology.nics if n.state is NicState.DOWN]
    return "; ".join(parts)[:1000]
