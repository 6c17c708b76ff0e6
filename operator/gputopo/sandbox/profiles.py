"""Sandbox profiles: which simulated GPU node types a sandbox has, and how they sit under network switches.

Nodes are laid out leaf by leaf: every tier-0 (leaf) switch holds ``leaf_size`` nodes of one node type, and
``leaves_per_spine`` leaves share a tier-1 (spine) switch — the shape of a rail-optimised GPU cluster, where a
multi-node gang of one GPU model can stay under one leaf. A profile with ``domain_size`` groups that many
consecutive nodes into one multi-node NVLink domain (an NVL72 rack of 18 GB200 or GB300 trays): their fake
GPUs report the rack's fabric info, as real ones do through NVML. Node types are the probe's fake sources
(``gputopo_probe.source``): the catalog's, and the Grace nodes of ``gputopo_probe.fake.grace``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gputopo.sandbox.errors import SandboxError

__all__ = ["PROFILES", "TIER0_LABEL", "TIER1_LABEL", "NodePlan", "Profile", "domain_fabric", "plan_nodes"]

TIER0_LABEL = "fabric.topograph.run/tier-0"
TIER1_LABEL = "fabric.topograph.run/tier-1"


@dataclass(frozen=True)
class Profile:
    name: str
    node_types: tuple[str, ...]
    leaf_size: int = 2
    leaves_per_spine: int = 4
    description: str = ""
    domain_size: int = 0  # nodes per multi-node NVLink domain; 0: none


@dataclass(frozen=True)
class NodePlan:
    name: str
    node_type: str
    leaf: str
    spine: str
    nvlink_domain: str = ""  # the rack whose NVLink fabric the node's GPUs are on


def domain_fabric(domain: str) -> tuple[str, int]:
    """The cluster UUID and clique id a fake rack's GPUs report (stable per rack name)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputopo-sandbox/{domain}")), 1


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            "mixed",
            (
                "hgx-h100",
                "dgx-a100",
                "hgx-h100",
                "h100-nvl-pairs",
                "dgx1-v100",
                "rtx4090-pcie",
                "hgx-a100",
                "l40s-pcie",
            ),
            description="HGX H100, DGX/HGX A100, 8x H100 NVL pairs, DGX-1 V100, RTX 4090 and L40S PCIe nodes",
        ),
        Profile("hgx-h100", ("hgx-h100",), leaf_size=4, description="HGX H100 nodes only (NVSwitch, 8 NICs)"),
        Profile("dgx-a100", ("dgx-a100",), leaf_size=4, description="DGX A100 nodes only"),
        Profile("pcie", ("rtx4090-pcie", "l40s-pcie"), description="PCIe-only GPU nodes"),
        Profile(
            "nvl72",
            ("gb200-tray",),
            leaf_size=36,
            leaves_per_spine=2,
            domain_size=18,
            description="GB200 NVL72 racks of 18 trays (4 racks with --nodes 72), two racks per leaf switch",
        ),
        Profile(
            "gb300",
            ("gb300",),
            leaf_size=36,
            leaves_per_spine=2,
            domain_size=18,
            description="GB300 NVL72 racks of 18 trays as the probe reads them: NVLink-C2C, 4 ConnectX-8 800G "
            "rails and front-end ports per tray",
        ),
        Profile(
            "gh200",
            ("gh200",),
            leaf_size=8,
            description="GH200 nodes: one GPU on its Grace over NVLink-C2C, 4 InfiniBand rails and a front-end port",
        ),
    )
}


def plan_nodes(profile_name: str, count: int) -> list[NodePlan]:
    """Name, node type and switches of each simulated node of a sandbox."""
    profile = PROFILES.get(profile_name)
    if profile is None:
        raise SandboxError(f"unknown profile {profile_name!r}; choose one of {', '.join(sorted(PROFILES))}")
    if count < 1:
        raise SandboxError("a sandbox needs at least one node (--nodes 1 or more)")
    plans = []
    width = max(2, len(str(count - 1)))
    for i in range(count):
        leaf = i // profile.leaf_size
        node_type = profile.node_types[leaf % len(profile.node_types)]
        plans.append(
            NodePlan(
                name=f"{node_type}-{i:0{width}d}",
                node_type=node_type,
                leaf=f"leaf-{leaf:02d}",
                spine=f"spine-{leaf // profile.leaves_per_spine:02d}",
                nvlink_domain=f"rack-{i // profile.domain_size:02d}" if profile.domain_size else "",
            )
        )
    return plans
