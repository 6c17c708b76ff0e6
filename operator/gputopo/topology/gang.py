"""The bus bandwidth of a gang spread over nodes, and over multi-node NVLink domains (GB200/GB300 NVL72 racks).

Without domains (``estimate_gang(members)``): the minimum of each node's intra-node figure
(``estimate_node``) and the inter-node part, the weakest node's nearest-NIC bandwidth divided by the network
tier's oversubscription.

With domains (``domains[i]`` names member i's NVLink domain, the clique of ``gputopo.topology.fabric``):
members of one domain whose GPUs reach the domain's NVSwitch fabric form one NVLink group; a domain is a
level below the leaf switch. Inside a group every byte moves over NVLink at the GPUs' fabric bandwidth B (the
GPU's whole NVLink, 18 x 50 GB/s per direction on NVLink 5): the group's figure is the better of a ring,
``NVLINK_RING_EFFICIENCY * B``, and multi-node NVLink SHARP, ``MNNVL_NVLS_ALGBW_EFFICIENCY * B * 2(k-1)/k`` over
its k GPUs. Between groups the bytes go through the NICs, and a group acts as one big node: its inter-node
part is the sum of its members' nearest-NIC bandwidth (each of its NICs carries one ring channel across the
domain boundary). A member outside every domain is a group of its own, exactly as without domains.

Calibration (``gputopo.topology.calibration``, NVL72 rows): MNNVL_NVLS_ALGBW_EFFICIENCY from coreweave/nccl-tests
PR #43 (a full 72-GPU rack, 839-847 GB/s at 4-8 GiB: algbw ~430 of 900 GB/s) and the two-tray MNNVL figure
(811 GB/s); NCCL's NVLS over the rack's switch trays reaches a lower share of the link than NVLS inside an H100
baseboard (``NVLS_ALGBW_EFFICIENCY``). The NIC side is the estimator's unchanged NIC model, which NVIDIA/nccl#1801
(3 racks joined over InfiniBand, 4 and 8 GPUs per rack) checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gputopo.api.nodetopology import FabricHealth
from gputopo.topology.estimate import (
    NVLINK_RING_EFFICIENCY,
    BusBandwidth,
    estimate_node,
    nvlink_fabric,
)
from gputopo.topology.fabric import fabric_health
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology, TopologyError
from gputopo.topology.nccl import DEFAULT_NCCL, NcclSettings
from gputopo.topology.rails import inter_node_part

__all__ = [
    "DEGRADED_FABRIC_SHARE",
    "MNNVL_NVLS_ALGBW_EFFICIENCY",
    "domain_bandwidth",
    "estimate_gang",
    "member_fabric",
    "split_evenly",
]

# Multi-node NVLink SHARP all-reduce algbw as a share of the GPU's per-direction NVLink bandwidth.
MNNVL_NVLS_ALGBW_EFFICIENCY = 0.49
# What a GPU whose fabric reports degraded bandwidth keeps of its NVLink into the domain. NVML does not say how
# much is lost; an NVL72 GPU's 18 links spread over 9 switch trays, so losing one tray costs 2 of 18 *[inferred]*.
DEGRADED_FABRIC_SHARE = 8 / 9

Member = tuple[Topology, Sequence[int]]


def domain_bandwidth(gpus: int, fabric_gbps: float, nvls: bool) -> tuple[float, str]:
    """All-reduce busbw of ``gpus`` GPUs on one NVLink fabric of ``fabric_gbps`` per GPU, and how it runs."""
    ring = NVLINK_RING_EFFICIENCY * fabric_gbps
    if nvls and gpus > 1:
        sharp = MNNVL_NVLS_ALGBW_EFFICIENCY * fabric_gbps * 2 * (gpus - 1) / gpus
        if sharp > ring:
            return sharp, "multi-node NVLink SHARP"
    return ring, "ring"


# Per GPU set of one topology (a gang's figure asks it of every member node, twice).
_MEMBER_FABRIC: Table[tuple[int, ...], tuple[float, bool]] = Table("member fabric")


def member_fabric(topology: Topology, gpus: Sequence[int]) -> tuple[float, bool]:
    """The NVLink bandwidth the GPUs have into their domain's fabric (``nvlink_fabric``) as their fabric
    health leaves it: none when one GPU's fabric is down, ``DEGRADED_FABRIC_SHARE`` of it when degraded."""
    memo = topology.memo.table(_MEMBER_FABRIC)
    key = tuple(gpus)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _member_fabric(topology, gpus)
    return found


def _member_fabric(topology: Topology, gpus: Sequence[int]) -> tuple[float, bool]:
    gbps, nvls = nvlink_fabric(topology, gpus)
    worst = {fabric_health(topology.gpus[g].fabric)[0] for g in gpus}
    if FabricHealth.DOWN in worst:
        return 0.0, nvls
    if FabricHealth.DEGRADED in worst:
        return gbps * DEGRADED_FABRIC_SHARE, nvls
    return gbps, nvls


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` spread over ``parts`` as evenly as possible, larger shares first (24 over 2: 12, 12)."""
    if parts < 1 or total < parts:
        raise TopologyError(f"cannot spread {total} over {parts} parts")
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


@dataclass
class _Group:
    """Members that share NVLink: one multi-node NVLink domain, or one node on its own."""

    name: str
    domain: str
    ranks: list[int] = field(default_factory=list)


def _groups(members: Sequence[Member], domains: Sequence[str] | None) -> list[_Group]:
    if domains is not None and len(domains) != len(members):
        raise TopologyError(f"{len(domains)} domains for {len(members)} gang members")
    groups: dict[str, _Group] = {}
    for rank, (topology, gpus) in enumerate(members):
        domain = domains[rank] if domains is not None else ""
        if domain and member_fabric(topology, gpus)[0] > 0:
            groups.setdefault("d:" + domain, _Group(f"NVLink domain {domain}", domain)).ranks.append(rank)
        else:
            groups[f"n:{rank}"] = _Group(f"node {rank}", "", [rank])
    return list(groups.values())


def _intra(group: _Group, members: Sequence[Member]) -> tuple[float, str]:
    if len(group.ranks) == 1:
        topology, gpus = members[group.ranks[0]]
        result = estimate_node(topology, gpus)
        return result.busbw_gbps, f"intra-node {group.name}: {result.bottleneck}"
    fabrics = [member_fabric(*members[r]) for r in group.ranks]
    gbps = min(f[0] for f in fabrics)
    k = sum(len(members[r][1]) for r in group.ranks)
    value, how = domain_bandwidth(k, gbps, all(f[1] for f in fabrics))
    nodes = len(group.ranks)
    return value, f"intra-domain {group.name}: {k} GPUs on {nodes} nodes over NVLink ({gbps:.0f} GB/s per GPU), {how}"


def _inter(
    group: _Group, members: Sequence[Member], nic_rate_gbps: float | None, settings: NcclSettings
) -> tuple[float, str]:
    parts = [inter_node_part(members[r][0], members[r][1], nic_rate_gbps, settings) for r in group.ranks]
    if len(parts) == 1:
        return parts[0][0], f"{group.name}: {parts[0][1]}"
    total = sum(value for value, _ in parts)
    return total, f"{group.name}: NICs of {len(parts)} nodes, {total:.1f} GB/s"


def estimate_gang(
    members: Sequence[Member],
    *,
    oversubscription: float = 1.0,
    nic_rate_gbps: float | None = None,
    domains: Sequence[str] | None = None,
    settings: NcclSettings = DEFAULT_NCCL,
) -> BusBandwidth:
    """Estimated bus bandwidth of a gang spread over nodes: one ``(topology, gpus)`` member per node.

    ``domains[i]`` is member i's multi-node NVLink domain ('' for none); members of one domain talk over
    NVLink, everything else over the NICs (see the module's text). One member is ``estimate_node``.
    ``nic_rate_gbps`` replaces every NIC's rate (Gb/s); ``oversubscription`` divides the NIC part;
    ``settings`` is the NCCL the job runs (its version decides GPUDirect RDMA on Grace).
    """
    if not members:
        raise TopologyError("a gang needs at least one member")
    if oversubscription <= 0:
        raise TopologyError(f"oversubscription must be positive, got {oversubscription}")
    if nic_rate_gbps is not None and nic_rate_gbps <= 0:
        raise TopologyError(f"NIC rate must be positive, got {nic_rate_gbps}")
    groups = _groups(members, domains)
    worst_intra = min((_intra(g, members) for g in groups), key=lambda part: part[0])
    if len(groups) == 1:
        if len(members) == 1:
            return estimate_node(*members[0])
        return BusBandwidth(*worst_intra)
    inter_value, inter_what = min(
        (_inter(g, members, nic_rate_gbps, settings) for g in groups), key=lambda part: part[0]
    )
    inter_value /= oversubscription
    if oversubscription != 1.0:
        inter_what += f", ÷ {oversubscription:g} tier oversubscription"
    across = "inter-domain" if any(g.domain for g in groups) else "inter-node"
    if inter_value < worst_intra[0]:
        return BusBandwidth(inter_value, f"{across} {inter_what}")
    return BusBandwidth(*worst_intra)
