"""The bus bandwidth a placed gang has on what still works (for Tolerate, and when reality differs).

The gang keeps its GPUs and the NICs it was given (NCCL_IB_HCA names them): a NIC that goes down takes
its rail away, the remaining rails carry on; a Down NVLink falls back to PCIe. Scored with the engine's
own ``score_gang``, so the figure compares with the one the job was placed with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gputopo.api.nodetopology import NicState
from gputopo.api.trainingjob import WorkerPlacement
from gputopo.control.facts import NodeFacts, TopologyFacts
from gputopo.placement.gang import NodeShare, score_gang
from gputopo.placement.types import NodeInfo, Snapshot, TierConfig
from gputopo.topology.model import Topology

__all__ = ["GangEstimate", "estimate_workers"]


@dataclass(frozen=True, slots=True)
class GangEstimate:
    busbw_gbps: float
    bottleneck: str


def _only_nics(topology: Topology, names: set[str]) -> Topology:
    """The topology with every NIC the gang was not given shown Down (it cannot use them)."""
    if not names or not topology.nics:
        return topology
    nics = tuple(n if n.name in names else replace(n, state=NicState.DOWN) for n in topology.nics)
    return Topology(topology.gpus, topology.links, nics, topology.system)


def estimate_workers(
    workers: Sequence[WorkerPlacement],
    topologies: Mapping[str, TopologyFacts],
    nodes: Mapping[str, NodeFacts],
    tiers: TierConfig,
) -> GangEstimate | None:
    """The gang's estimate on the topologies as they are now; None when a node's topology is unknown."""
    by_node: dict[str, list[WorkerPlacement]] = {}
    for worker in workers:
        by_node.setdefault(worker.node, []).append(worker)
    infos: list[NodeInfo] = []
    shares: list[NodeShare] = []
    for i, (name, group) in enumerate(sorted(by_node.items())):
        facts = topologies.get(name)
        if facts is None or facts.topology is None:
            return None
        topology = facts.topology
        if any(g >= topology.gpu_count for w in group for g in w.gpus):
            return None
        if len(by_node) > 1:
            topology = _only_nics(topology, {nic for w in group for nic in w.nics})
        node = nodes.get(name)
        infos.append(NodeInfo(name=name, topology=topology, labels=node.labels if node else {}))
        masks = tuple(sum(1 << g for g in set(w.gpus)) for w in group)
        shares.append(NodeShare(i, masks))
    if not shares:
        return None
    score = score_gang(Snapshot(infos, tiers), shares)
    return GangEstimate(score.busbw_gbps, score.bottleneck)
