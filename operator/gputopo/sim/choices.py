"""What a node can give a gang, per the exact reference: every subset of its free GPUs that splits into valid
groups, and the nodes (in the sets a gang may mix) that have one.

Shared by the exhaustive search (``gputopo.sim.exact``) and the ILP (``gputopo.sim.exact_ilp``); both stand on
it and neither on the other. It shares only the estimator and the pair rule of a group with the engine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from itertools import combinations

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.filters import filter_nodes
from gputopo.placement.types import NodeInfo, Request, Snapshot
from gputopo.topology.estimate import estimate_node
from gputopo.topology.groups import pair_allowed
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology
from gputopo.topology.rails import inter_node_bandwidth

__all__ = ["SubsetChoice", "eligible_sets", "subset_choices"]


@dataclass(frozen=True, slots=True)
class SubsetChoice:
    """A node's GPUs that split into ``workers`` valid groups of the gang, and what the estimator says of them."""

    workers: int
    gpus: tuple[int, ...]
    intra_gbps: float
    inter_gbps: float


Splits = Callable[[tuple[int, ...]], bool]

# In the topology's own memo. Per (free GPUs, group size, rule): the node's subset choices.
_CHOICES: Table[tuple[tuple[int, ...], int, IntraNode], tuple[SubsetChoice, ...]] = Table("exact subset choices")
# Per (group size, rule): the memoised "splits into groups" test.
_SPLITS: Table[tuple[int, IntraNode], Splits] = Table("exact group splits")


def _splits(topology: Topology, k: int, intra: IntraNode) -> Splits:
    @cache
    def splits(gpus: tuple[int, ...]) -> bool:
        """Whether the GPUs split into groups of k whose every pair meets the rule (the lowest GPU in each)."""
        if not gpus:
            return True
        first, rest = gpus[0], gpus[1:]
        for others in combinations(rest, k - 1):
            valid = all(pair_allowed(topology, a, b, intra) for a, b in combinations((first, *others), 2))
            if valid and splits(tuple(g for g in rest if g not in others)):
                return True
        return False

    return splits


def _free(node: NodeInfo) -> tuple[int, ...]:
    return tuple(g.index for g in node.topology.gpus if g.healthy and g.index not in node.used_gpus)


def _choices(topology: Topology, free: tuple[int, ...], k: int, intra: IntraNode) -> tuple[SubsetChoice, ...]:
    table = topology.memo.table(_CHOICES)
    found = table.get((free, k, intra))
    if found is not None:
        return found
    all_splits = topology.memo.table(_SPLITS)
    splits = all_splits.get((k, intra))
    if splits is None:
        splits = all_splits[(k, intra)] = _splits(topology, k, intra)
    out = []
    for m in range(1, len(free) // k + 1):
        for gpus in combinations(free, m * k):
            if splits(gpus):
                intra_bw = estimate_node(topology, gpus).busbw_gbps
                out.append(SubsetChoice(m, gpus, intra_bw, inter_node_bandwidth(topology, gpus).busbw_gbps))
    choices = table[(free, k, intra)] = tuple(out)
    return choices


def subset_choices(node: NodeInfo, request: Request) -> tuple[SubsetChoice, ...]:
    """Every subset of the node's free, healthy GPUs that splits into valid groups of the gang."""
    return _choices(node.topology, _free(node), request.gpus_per_worker, IntraNode(request.intra_node))


def eligible_sets(snapshot: Snapshot, request: Request) -> list[list[int]]:
    """Nodes (by index) that pass the filters and can take a worker, split into the sets a gang may mix."""
    sets: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in filter_nodes(snapshot.nodes, request).passed:
        node = snapshot.nodes[i]
        if subset_choices(node, request):
            key = (node.gpu_model if request.same_model else "", node.driver_version if request.same_driver else "")
            sets[key].append(i)
    return list(sets.values())
