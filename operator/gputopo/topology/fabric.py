"""Multi-node NVLink fabric info: what a GPU's health mask says, and which NVLink domain a node is in.

NVML packs the fabric health into ``healthMask`` (``NVML_GPU_FABRIC_HEALTH_GET(mask, X) = (mask >> SHIFT_X) &
WIDTH_X``; nvml.h and nvidia-ml-py 13.615.71 ``pynvml.py`` l.7206-7261): two bits each for degraded bandwidth
(shift 0), route recovery (2), unhealthy route (4), access-timeout recovery (6), 1 meaning TRUE and 2 FALSE; four
bits of incorrect configuration (shift 8; 1 none, 2.. a reason); partition assigned (12); fabric manager
connection (14, 1 connected, 2 disconnected). ``healthSummary``: 0 not supported, 1 healthy, 2 unhealthy,
3 limited capacity.

A node's domain follows GPU Feature Discovery's ``nvidia.com/gpu.clique`` rule (k8s-device-plugin
``internal/lm/imex.go``): only fabric-attached GPUs count, and when they disagree the node is in no domain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from gputopo.api.nodetopology import FabricHealth, FabricState
from gputopo.topology.memo import Table
from gputopo.topology.model import Fabric, Topology

__all__ = [
    "HEALTH_SUMMARY_NAMES",
    "DomainReading",
    "fabric_health",
    "health_mask",
    "node_domain",
    "with_fabric",
]

_TRUE: Final = 1
_FALSE: Final = 2
_SHIFT_DEGRADED_BW: Final = 0
_SHIFT_ROUTE_RECOVERY: Final = 2
_SHIFT_ROUTE_UNHEALTHY: Final = 4
_SHIFT_ACCESS_TIMEOUT_RECOVERY: Final = 6
_SHIFT_INCORRECT_CONFIGURATION: Final = 8
_SHIFT_GFM_STATE: Final = 14
_GFM_DISCONNECTED: Final = 2

HEALTH_SUMMARY_NAMES: Final[dict[int, str]] = {0: "", 1: "Healthy", 2: "Unhealthy", 3: "LimitedCapacity"}

# Two-bit flags that mean the fabric carries less than it should, with the reason as published.
_DEGRADED_FLAGS: Final = (
    (_SHIFT_DEGRADED_BW, "bandwidth degraded"),
    (_SHIFT_ROUTE_UNHEALTHY, "route unhealthy"),
    (_SHIFT_ROUTE_RECOVERY, "route recovery in progress"),
    (_SHIFT_ACCESS_TIMEOUT_RECOVERY, "access timeout recovery in progress"),
)
_INCORRECT_CONFIGURATION: Final[dict[int, str]] = {
    2: "incorrect system GUID",
    3: "incorrect chassis serial number",
    4: "no partition",
    5: "insufficient NVLinks",
    6: "incompatible GPU firmware",
    7: "invalid location",
    8: "GPU state invalid",
}


def _flag(mask: int, shift: int) -> int:
    return mask >> shift & 0x3


def health_mask(
    *,
    degraded_bw: bool = False,
    route_unhealthy: bool = False,
    route_recovery: bool = False,
    access_timeout_recovery: bool = False,
    incorrect_configuration: int = 1,
    gfm_connected: bool = True,
) -> int:
    """The ``healthMask`` NVML reports for these flags (each flag supported), as a fake fabric would set it."""

    def two(value: bool) -> int:
        return _TRUE if value else _FALSE

    return (
        two(degraded_bw) << _SHIFT_DEGRADED_BW
        | two(route_recovery) << _SHIFT_ROUTE_RECOVERY
        | two(route_unhealthy) << _SHIFT_ROUTE_UNHEALTHY
        | two(access_timeout_recovery) << _SHIFT_ACCESS_TIMEOUT_RECOVERY
        | (incorrect_configuration & 0xF) << _SHIFT_INCORRECT_CONFIGURATION
        | (1 if gfm_connected else _GFM_DISCONNECTED) << _SHIFT_GFM_STATE
    )


def fabric_health(fabric: Fabric | None) -> tuple[FabricHealth, str]:
    """A GPU's fabric as placement sees it, with the reason when it is not Healthy.

    Down: the GPU supports the fabric but is not in it (registration not Completed, or it failed). Degraded:
    attached, but the health mask or summary reports less bandwidth, route trouble, a wrong configuration or a
    lost fabric manager. A GPU without fabric support (NotSupported: every GPU outside an NVL rack) is Healthy.
    """
    if fabric is None or fabric.state is FabricState.NOT_SUPPORTED:
        return FabricHealth.HEALTHY, ""
    if fabric.state is not FabricState.COMPLETED:
        return FabricHealth.DOWN, f"NVLink fabric registration {fabric.state.value}"
    if fabric.status != 0:
        return FabricHealth.DOWN, f"NVLink fabric registration failed (NVML return {fabric.status})"
    mask = fabric.health_mask
    reasons = [text for shift, text in _DEGRADED_FLAGS if _flag(mask, shift) == _TRUE]
    config = mask >> _SHIFT_INCORRECT_CONFIGURATION & 0xF
    if config in _INCORRECT_CONFIGURATION:
        reasons.append(_INCORRECT_CONFIGURATION[config])
    if _flag(mask, _SHIFT_GFM_STATE) == _GFM_DISCONNECTED:
        reasons.append("fabric manager disconnected")
    summary = HEALTH_SUMMARY_NAMES.get(fabric.health_summary, "")
    if summary in ("Unhealthy", "LimitedCapacity") and not reasons:
        reasons.append(f"health summary {summary}")
    if reasons:
        return FabricHealth.DEGRADED, "NVLink fabric " + ", ".join(reasons)
    return FabricHealth.HEALTHY, ""


@dataclass(frozen=True, slots=True)
class DomainReading:
    """A node's multi-node NVLink domain: its clique ('' for none), and the worst of its GPUs' fabric health."""

    clique: str = ""
    health: FabricHealth = FabricHealth.HEALTHY
    reason: str = ""


_SEVERITY: Final = {FabricHealth.HEALTHY: 0, FabricHealth.DEGRADED: 1, FabricHealth.DOWN: 2}


# A topology's domain reading, read once: the placement engine asks it of every candidate node per decision.
_DOMAIN: Table[None, DomainReading] = Table("NVLink domain")


def node_domain(topology: Topology) -> DomainReading:
    """The node's NVLink domain by GPU Feature Discovery's rule, and its fabric health.

    The clique is the one every fabric-attached GPU reports; none when no GPU is attached or they disagree
    (GFD then sets no label either). Health is the worst GPU's, with that GPU named in the reason.
    """
    memo = topology.memo.table(_DOMAIN)
    found = memo.get(None)
    if found is None:
        found = memo[None] = _read_domain(topology)
    return found


def _read_domain(topology: Topology) -> DomainReading:
    cliques = {g.fabric.clique for g in topology.gpus if g.fabric is not None and g.fabric.attached}
    clique = cliques.pop() if len(cliques) == 1 else ""
    worst: tuple[FabricHealth, str] = (FabricHealth.HEALTHY, "")
    for gpu in topology.gpus:
        health, reason = fabric_health(gpu.fabric)
        if _SEVERITY[health] > _SEVERITY[worst[0]]:
            worst = (health, f"GPU{gpu.index}: {reason}")
    if not clique and worst[0] is FabricHealth.HEALTHY and cliques:
        worst = (FabricHealth.DEGRADED, "GPUs report different NVLink cliques")
    return DomainReading(clique, *worst)


def with_fabric(topology: Topology, cluster_uuid: str, clique_id: int) -> Topology:
    """The node with every GPU registered and healthy in one NVLink domain (a tray of a fake NVL72 rack)."""
    fabric = Fabric(cluster_uuid, clique_id, FabricState.COMPLETED, 0, health_mask(), 1)
    gpus = tuple(replace(g, fabric=fabric) for g in topology.gpus)
    return Topology(gpus, topology.links, topology.nics, topology.system)
