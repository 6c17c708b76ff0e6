"""The NodeTopology status the probe publishes: the topology with its health, plus what only the probe knows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gputopo.api.conditions import HEALTHY, Condition
from gputopo.api.nodetopology import (
    GpuHealth,
    GpuHealthState,
    GpuStatus,
    LinkState,
    NicState,
    NodeTopologyStatus,
    NvlinkInfo,
    ProbeInfo,
)
from gputopo.topology import to_status
from gputopo.topology.model import Topology
from gputopo_probe import __version__
from gputopo_probe.health.monitor import GpuDetail

__all__ = ["build_status", "node_health", "topology_status"]


def topology_status(topology: Topology) -> NodeTopologyStatus:
    """The topology part, through the shared converter (bandwidths from ``gputopo.topology.bandwidth``)."""
    return to_status(topology)


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
        type=HEALTHY,
        status="True" if summary == "healthy" else "False",
        reason=summary.capitalize(),
        message="" if summary == "healthy" else _summary(topology),
    )
    return status.model_copy(
        update={
            "gpus": gpus,
            "observed_at": observed_at,
            "probe": ProbeInfo(version=__version__, backend=backend),
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
