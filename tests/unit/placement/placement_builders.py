"""Fluent builders of nodes and snapshots for placement tests."""

from __future__ import annotations

import uuid
from dataclasses import replace
from functools import cache

from gputopo.api.nodetopology import GpuHealthState, LinkState
from gputopo.placement import NodeInfo, Snapshot, Taint
from gputopo.placement.types import TierConfig
from gputopo.topology.catalog import load_node_type
from gputopo.topology.fabric import health_mask, with_fabric
from gputopo.topology.model import Topology

TIER0 = "fabric.topograph.run/tier-0"
TIER1 = "fabric.topograph.run/tier-1"


class NodeBuilder:
    def __init__(self, name: str, node_type: str) -> None:
        self._info = NodeInfo(name, load_node_type(node_type), driver_version="570.133.20")

    def used(self, *gpus: int) -> NodeBuilder:
        self._info = replace(self._info, used_gpus=frozenset(gpus))
        return self

    def leaf(self, leaf: str, spine: str = "spine-a") -> NodeBuilder:
        self._info = replace(self._info, labels={**self._info.labels, TIER0: leaf, TIER1: spine})
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._info = replace(self._info, labels={**self._info.labels, key: value})
        return self

    def taint(self, key: str, value: str = "") -> NodeBuilder:
        self._info = replace(self._info, taints=(*self._info.taints, Taint(key, value)))
        return self

    def link_down(self, a: int, b: int) -> NodeBuilder:
        self._info = replace(self._info, topology=self._info.topology.with_link_state(a, b, LinkState.DOWN))
        return self

    def unhealthy(self, gpu: int) -> NodeBuilder:
        topology = self._info.topology.with_gpu_health(gpu, GpuHealthState.UNHEALTHY, "XID 79")
        self._info = replace(self._info, topology=topology)
        return self

    def in_rack(self, rack: str) -> NodeBuilder:
        """A tray of NVL72 rack ``rack``: every GPU registered in the rack's NVLink domain."""
        self._info = replace(self._info, topology=_rack_topology(self._info.topology.gpu_model, rack))
        return self

    def fabric_degraded(self) -> NodeBuilder:
        t = self._info.topology
        gpus = tuple(
            replace(g, fabric=replace(g.fabric, health_mask=health_mask(degraded_bw=True)) if g.fabric else None)
            for g in t.gpus
        )
        self._info = replace(self._info, topology=Topology(gpus, t.links, t.nics, t.system))
        return self

    def driver(self, version: str) -> NodeBuilder:
        self._info = replace(self._info, driver_version=version)
        return self

    def not_ready(self) -> NodeBuilder:
        self._info = replace(self._info, ready=False)
        return self

    def build(self) -> NodeInfo:
        return self._info


def node(name: str, node_type: str = "hgx-h100") -> NodeBuilder:
    return NodeBuilder(name, node_type)


def snapshot(*nodes: NodeBuilder) -> Snapshot:
    return Snapshot(n.build() for n in nodes)


@cache
def _rack_topology(model: str, rack: str) -> Topology:
    """One shared tray topology per rack (as a cluster's nodes of one type share theirs)."""
    return with_fabric(load_node_type("gb200-tray"), str(uuid.uuid5(uuid.NAMESPACE_DNS, rack)), 1)


def clique(rack: str) -> str:
    return f"{uuid.uuid5(uuid.NAMESPACE_DNS, rack)}.1"


def racks(
    count: int, trays: int = 18, *, used: dict[str, int] | None = None, racks_per_leaf: int = 2
) -> list[NodeBuilder]:
    """``count`` NVL72 racks of ``trays`` GB200 trays (``r0-t00`` …), two racks per leaf switch; ``used``
    names how many of a rack's first trays are fully in use."""
    out = []
    for r in range(count):
        rack = f"r{r}"
        for t in range(trays):
            b = node(f"{rack}-t{t:02d}", "gb200-tray").in_rack(rack).leaf(f"leaf-{r // racks_per_leaf}")
            if used and t < used.get(rack, 0):
                b = b.used(0, 1, 2, 3)
            out.append(b)
    return out


def rack_snapshot(*nodes: NodeBuilder, cap: int | None = None) -> Snapshot:
    tiers = TierConfig() if cap is None else TierConfig(domain_node_cap=cap)
    return Snapshot((n.build() for n in nodes), tiers)
