"""Well-connected GPU groups of one node, ranked by estimated bus bandwidth.

A group of size k is a set of free, healthy GPUs every pair of which is joined by an Up link that meets
the job's ``intraNode`` requirement (Degraded and Down links never are). Groups are ranked by

1. estimated all-reduce bus bandwidth, highest first;
2. fewer GPUs whose health is Degraded;
3. how well the remaining free GPUs serve the next jobs of 8, 4, 2 and 1 GPUs (``remainder``), so a pick
   does not split an NVLink pair or quad it need not;
4. fewer NUMA nodes, then fewer distinct nearest-NIC sets (``locality``): neither shows in the bus
   bandwidth, so they yield to the bandwidth the next jobs get (a cross-socket NVLink pair that leaves two
   NVLinked pairs beats a same-socket pair that strands two GPUs on PCIe);
5. the sum of the remaining GPUs' pairwise hop bandwidths, then lowest GPU indices.

Speed comes from symmetry: GPUs that are interchangeable (same links to every other GPU, same model,
health, NUMA node and NIC distances; ``symmetry``) fall into one class, and a group is only a count per
class. Every group of one such "shape" has the same bandwidth and locality and leaves the same remainder,
so each shape is scored once, and the groups of equal shapes are produced in index order without being
scored one by one. An NVSwitch node is one class per socket, so its groups cost little more than listing
them. Results are memoised with the estimator's tables, which topologies of equal content (nodes of one
type) share.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations, islice, product, repeat
from math import comb, prod
from typing import NamedTuple

from gputopo.api.nodetopology import GpuHealthState, LinkKind, LinkState
from gputopo.api.trainingjob import IntraNode
from gputopo.topology.estimate import TopologyTables, topology_tables
from gputopo.topology.locality import locality
from gputopo.topology.memo import Table
from gputopo.topology.model import Link, Topology, TopologyError
from gputopo.topology.remainder import remainder
from gputopo.topology.symmetry import interchangeable

__all__ = ["Group", "pair_allowed", "well_connected_groups"]

# Shapes with at most this many groups are listed and sorted at once; larger ones are generated lazily.
_MATERIALISE = 4096


@dataclass(frozen=True, slots=True)
class Group:
    """A candidate GPU group of one node with its estimated all-reduce bus bandwidth (GB/s)."""

    gpus: tuple[int, ...]
    busbw_gbps: float
    bottleneck: str


def _allowed(link: Link, intra: IntraNode) -> bool:
    if link.state is not LinkState.UP:
        return False
    if intra is IntraNode.NVSWITCH:
        return link.kind is LinkKind.NVSWITCH and link.nvlinks > 0
    if intra is IntraNode.NVLINK:
        return link.is_nvlink and link.nvlinks > 0
    return True


def pair_allowed(topology: Topology, a: int, b: int, intra_node: IntraNode = IntraNode.ANY) -> bool:
    """Whether GPUs a and b may share a group: their link is Up and meets ``intra_node``."""
    return _allowed(topology.link(a, b), IntraNode(intra_node))


class _Shape(NamedTuple):
    """A count per class; ``first`` is its lowest-index group (the only one when ``fixed``)."""

    counts: tuple[int, ...]
    key: tuple[float, int, tuple[tuple[float, ...], ...], int, int, float]
    first: tuple[int, ...]
    fixed: bool
    busbw: float
    bottleneck: str


# Kept with the estimator's tables, so topologies of equal content share them.
# Per (free GPUs, intra-node rule): whether each class may pair inside itself, and which classes it may not join.
_CLASS_PAIRS: Table[tuple[int, IntraNode], tuple[list[bool], list[int]]] = Table("class pairs")
# Per (free GPUs, group size, intra-node rule, limit): the ranked groups.
_GROUPS: Table[tuple[int, int, IntraNode, int | None], tuple[Group, ...]] = Table("groups")
# Per free GPUs: the GPUs in classes of interchangeable ones.
_CLASSES: Table[int, list[list[int]]] = Table("gpu classes")


def _shapes(
    topology: Topology, tables: TopologyTables, classes: list[list[int]], k: int, intra: IntraNode, free_mask: int
) -> list[_Shape]:
    m = len(classes)
    sizes = [len(c) for c in classes]
    suffix = [sum(sizes[t:]) for t in range(m + 1)]
    class_pairs = tables.memo.table(_CLASS_PAIRS)
    found = class_pairs.get((free_mask, intra))
    if found is None:
        inner = [len(c) < 2 or _allowed(topology.link(c[0], c[1]), intra) for c in classes]
        cross = [
            sum(1 << y for y in range(m) if x != y and not _allowed(topology.link(classes[x][0], classes[y][0]), intra))
            for x in range(m)
        ]
        found = class_pairs[(free_mask, intra)] = (inner, cross)
    inner_ok, cross_bad = found
    degraded = [int(topology.gpus[c[0]].health is GpuHealthState.DEGRADED) for c in classes]
    first_masks = [[sum(1 << g for g in c[:i]) for i in range(len(c) + 1)] for c in classes]
    shapes: list[_Shape] = []
    estimate = tables.estimate

    def score(counts: tuple[int, ...], group: int, sick: int, fixed: bool) -> None:
        est = estimate(group)
        rest = free_mask & ~group
        sockets, nics = locality(topology, group)
        left = tuple(tuple(-bw for bw in packing) for packing in remainder(topology, rest))
        key = (-round(est.busbw_gbps, 9), sick, left, sockets, nics, -round(tables.pair_sum(rest), 9))
        shapes.append(_Shape(counts, key, tables.bits(group), fixed, est.busbw_gbps, est.bottleneck))

    if all(size == 1 for size in sizes):
        # No two GPUs alike: every group is a shape of its own. Walk the k-subsets directly.
        for combo in combinations(range(m), k):
            used = group = sick = 0
            for t in combo:
                if cross_bad[t] & used:
                    break
                used |= 1 << t
                group |= first_masks[t][1]
                sick += degraded[t]
            else:
                score((), group, sick, True)
        return shapes

    counts = [0] * m

    def fill(t: int, left: int, used: int, group: int, sick: int, fixed: bool) -> None:
        if left == 0:
            score(tuple(counts), group, sick, fixed)
            return
        if t == m or suffix[t] < left:
            return
        size = sizes[t]
        top = min(left, size)
        if top > 1 and not inner_ok[t]:
            top = 1
        if top and cross_bad[t] & used:
            top = 0
        for c in range(top, 0, -1):
            counts[t] = c
            fill(t + 1, left - c, used | 1 << t, group | first_masks[t][c], sick + degraded[t] * c, fixed and c == size)
        counts[t] = 0
        fill(t + 1, left, used, group, sick, fixed)

    fill(0, k, 0, 0, 0, True)
    return shapes


def _groups_of(classes: list[list[int]], shape: _Shape) -> Iterator[tuple[int, ...]]:
    """Every group of one shape, lazily, in index (lexicographic) order."""
    if shape.fixed:
        yield shape.first
        return
    used = [(cls, c) for cls, c in zip(classes, shape.counts, strict=True) if c]
    partial = [(cls, c) for cls, c in used if c < len(cls)]
    if len(partial) == 1:
        # Adding the same whole classes to every combination keeps the lexicographic order.
        cls, c = partial[0]
        whole = [g for members, n in used if n == len(members) for g in members]
        if not whole:
            yield from combinations(cls, c)
            return
        for combo in combinations(cls, c):
            yield tuple(sorted((*whole, *combo)))
        return
    if prod(comb(len(cls), c) for cls, c in partial) <= _MATERIALISE:
        whole = [g for members, n in used if n == len(members) for g in members]
        combos = product(*(combinations(cls, c) for cls, c in partial))
        yield from sorted(tuple(sorted((*whole, *(g for part in combo for g in part)))) for combo in combos)
        return
    owner = {g: t for t, (cls, _) in enumerate(used) for g in cls}
    pool = sorted(owner)
    # left[i][t]: members of class t at positions >= i of the pool, to prune dead ends.
    left = [[0] * len(used) for _ in range(len(pool) + 1)]
    for i in range(len(pool) - 1, -1, -1):
        left[i] = list(left[i + 1])
        left[i][owner[pool[i]]] += 1
    need = [c for _, c in used]
    total = sum(need)
    chosen: list[int] = []

    def pick(start: int) -> Iterator[tuple[int, ...]]:
        if len(chosen) == total:
            yield tuple(chosen)
            return
        for i in range(start, len(pool)):
            if any(left[i][t] < need[t] for t in range(len(need))):
                return
            t = owner[pool[i]]
            if not need[t]:
                continue
            need[t] -= 1
            chosen.append(pool[i])
            yield from pick(i + 1)
            chosen.pop()
            need[t] += 1

    yield from pick(0)


@contextmanager
def _bulk() -> Iterator[None]:
    """Hold the cyclic garbage collector while thousands of acyclic Group objects are made.

    A 16-GPU node has 65,535 groups; collections triggered by their allocation would walk every live
    object again and again (half the time), and none of these objects can be part of a cycle.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _ranked(shapes: list[_Shape], classes: list[list[int]], limit: int | None) -> list[Group]:
    shapes = sorted(shapes, key=lambda s: (s.key, s.first))
    out: list[Group] = []
    i = 0
    while i < len(shapes) and (limit is None or len(out) < limit):
        j = i
        while j < len(shapes) and shapes[j].key == shapes[i].key:
            j += 1
        room = None if limit is None else limit - len(out)
        tied = shapes[i:j]
        if all(s.fixed for s in tied):
            out.extend(Group(s.first, s.busbw, s.bottleneck) for s in tied[:room])
        elif len(tied) == 1:
            s = tied[0]
            bw, what = s.busbw, s.bottleneck
            with _bulk():
                out.extend(map(Group, islice(_groups_of(classes, s), room), repeat(bw), repeat(what)))
        else:
            streams = [((g, s) for g in _groups_of(classes, s)) for s in tied]
            merged = heapq.merge(*streams, key=lambda item: item[0])
            with _bulk():
                out.extend(Group(g, s.busbw, s.bottleneck) for g, s in islice(merged, room))
        i = j
    return out


def well_connected_groups(
    topology: Topology,
    free: Iterable[int],
    k: int,
    intra_node: IntraNode = IntraNode.ANY,
    *,
    limit: int | None = None,
) -> list[Group]:
    """The groups of ``k`` free GPUs, best first (see the module docstring for the order).

    Unhealthy GPUs and groups that would use a Down or Degraded link are left out; ``nvswitch`` needs
    every pair on NVSwitch, ``nvlink`` every pair on NVLink. ``limit`` caps how many are returned.
    """
    n = topology.gpu_count
    free_set = sorted(set(free))
    for g in free_set:
        if not 0 <= g < n:
            raise TopologyError(f"no GPU{g}: the node has GPUs 0..{n - 1}")
    if k < 1:
        raise TopologyError(f"a group has at least one GPU, not {k}")
    if limit is not None and limit < 0:
        raise TopologyError(f"limit must not be negative, got {limit}")
    intra = IntraNode(intra_node)
    candidates = [g for g in free_set if topology.gpus[g].healthy]
    if len(candidates) < k or limit == 0:
        return []
    free_mask = sum(1 << g for g in candidates)
    tables = topology_tables(topology)
    memo = tables.memo.table(_GROUPS)
    key = (free_mask, k, intra, limit)
    found = memo.get(key)
    if found is None and limit is not None and (whole := memo.get((free_mask, k, intra, None))) is not None:
        found = whole[:limit]
    if found is None:
        classes_memo = tables.memo.table(_CLASSES)
        classes = classes_memo.get(free_mask)
        if classes is None:
            classes = classes_memo[free_mask] = interchangeable(topology, candidates)
        shapes = _shapes(topology, tables, classes, k, intra, free_mask)
        found = memo[key] = tuple(_ranked(shapes, classes, limit))
    return list(found)
