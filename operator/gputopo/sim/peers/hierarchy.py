"""Best fit down a hierarchy of node groups, the shared core of the Kueue TAS and Slurm topology/block peers.

``keys[level](node)`` names a node's group at each level, lowest first (an NVLink clique or block, then
switches, then the cluster). The lowest level whose group holds the whole gang is chosen, and in it the group
with the least capacity that still fits (best fit). Going down, child groups are taken largest first and the
last one best fit. With ``unit`` > 1 (Kueue's ``podset-slice-size``, Slurm's ``--segment``) every level-0 group
takes whole units: its capacity is rounded down to a multiple of the unit. Capacity is counted in pods (a
node holds ⌊free / gpusPerWorker⌋ workers); GPUs inside a node are the device plugin's first free ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from gputopo.placement.filters import filter_nodes
from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable
from gputopo.sim.peers.topology_blind import lowest_free

__all__ = ["GroupKey", "hierarchical_best_fit"]

# A node's group at one level, by snapshot index.
GroupKey = Callable[[int], str]


class _Tree:
    def __init__(self, keys: Sequence[GroupKey], caps: dict[int, int], unit: int) -> None:
        self.keys, self.caps, self.unit = keys, caps, unit

    def capacity(self, nodes: Sequence[int]) -> int:
        """Workers these nodes take: per level-0 group, rounded down to whole units."""
        per_group: dict[str, int] = defaultdict(int)
        for i in nodes:
            per_group[self.keys[0](i)] += self.caps[i]
        return sum(c - c % self.unit for c in per_group.values())

    def take(self, nodes: Sequence[int], level: int, need: int) -> list[tuple[int, int]]:
        """Spread ``need`` workers over ``nodes``, whose groups below ``level`` are the pools (-1: the nodes)."""
        if level < 0:
            pools = [(self.caps[i], str(i), [i]) for i in nodes]
        else:
            groups: dict[str, list[int]] = defaultdict(list)
            for i in nodes:
                groups[self.keys[level](i)].append(i)
            pools = [(self.capacity(v), k, v) for k, v in groups.items()]
        pools.sort(key=lambda p: (-p[0], p[1]))
        out: list[tuple[int, int]] = []
        while need > 0 and pools:
            fitting = [p for p in pools if p[0] >= need]
            pool = min(fitting, key=lambda p: (p[0], p[1])) if fitting else pools[0]
            pools.remove(pool)
            take = min(pool[0], need)
            if take <= 0:
                break
            out.extend([(pool[2][0], take)] if level < 0 else self.take(pool[2], level - 1, take))
            need -= take
        return out


def hierarchical_best_fit(
    snapshot: Snapshot, request: Request, keys: Sequence[GroupKey], *, unit: int = 1, who: str
) -> Placement | Unplaceable:
    """The gang by best fit down ``keys`` (see the module's text); ``who`` names the scheduler in refusals."""
    k, workers = request.gpus_per_worker, request.workers
    if unit < 1 or workers % unit:
        return Unplaceable(f"{who}: {workers} pods do not split into slices of {unit}")
    caps: dict[int, int] = {}
    for i in filter_nodes(snapshot.nodes, request).passed:
        node = snapshot.nodes[i]
        free = sum(1 for g in node.free_gpus if node.topology.gpus[g].healthy)
        if free >= k:
            caps[i] = free // k
    tree = _Tree(keys, caps, unit)
    for level in range(len(keys)):
        groups: dict[str, list[int]] = defaultdict(list)
        for i in caps:
            groups[keys[level](i)].append(i)
        fits = [(tree.capacity(v), name, v) for name, v in groups.items()]
        fits = [f for f in fits if f[0] >= workers]
        if not fits:
            continue
        _, _, nodes = min(fits, key=lambda f: (f[0], f[1]))
        shares = []
        for i, count in tree.take(nodes, level - 1, workers):
            node = snapshot.nodes[i]
            free = sum(1 << g for g in node.free_gpus if node.topology.gpus[g].healthy)
            groups_taken = []
            for _ in range(count):
                group = lowest_free(snapshot, node, free, k)
                assert group is not None
                free &= ~group
                groups_taken.append(group)
            shares.append(NodeShare(i, tuple(groups_taken)))
        return assemble(snapshot, shares)
    slices = f" in slices of {unit}" if unit > 1 else ""
    return Unplaceable(f"{who}: no domain holds {workers} pods of {k} GPUs{slices}")
