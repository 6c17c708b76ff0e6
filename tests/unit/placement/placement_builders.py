"""Fluent builders of nodes and snapshots for placement tests."""

from __future__ import annotations

from dataclasses import replace

from gputopo.api.nodetopology import GpuHealthState, LinkState
from gputopo.placement import NodeInfo, Snapshot, Taint
from gputopo.topology.catalog import load_node_type

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
