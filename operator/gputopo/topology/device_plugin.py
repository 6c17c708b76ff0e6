"""The GPUs NVIDIA's device plugin gives a pod: go-gpuallocator's best-effort policy, ported.

With ``nvidia.com/gpu`` limits the kubelet, not gputopo, picks a rank's GPUs on its node: it calls the
plugin's ``GetPreferredAllocation(available, mustInclude, size)`` with the node's free devices and no pod
identity, and k8s-device-plugin (``internal/rm/nvml_manager.go`` ``alignedAlloc``, commit 1b826ac, which
vendors go-gpuallocator v0.6.0) answers with ``gpuallocator.NewBestEffortPolicy().Allocate``. This module
follows ``gpuallocator/besteffort_policy.go`` of NVIDIA/go-gpuallocator at commit 876e7b7 (unchanged in
the policy since v0.6.0):

* a pair of GPUs scores the sum of its links' points (``calculateGPUPairScore``): PCIe common ancestor
  CrossCPU 10, SameCPU 20, HostBridge 30, MultiSwitch 40, SingleSwitch 50, SameBoard 60; 100 per direct
  NVLink (up to 18);
* it pads the available list with empty slots to a multiple of ``size``, walks every partition of it into
  sets of ``size`` (the first device of each set in increasing order, padding all in one set), keeps the
  first partition with the highest total score among those with a padding-free set holding every required
  device, and returns that partition's highest-scoring set that holds the required devices (the first on
  ties). ``size`` 1 takes the first available device that is the required one, if any.

The walk here visits partitions in the Go order and skips a branch only when an upper bound on its score
cannot beat the best so far, so it returns what the Go code returns, not merely an equally good set.

Mapping gputopo's links (what is approximated):

* PCIe levels map one to one (PIX SingleSwitch, PXB MultiSwitch, PHB HostBridge, NODE SameCPU, SYS
  CrossCPU); gputopo reads NVML's "same board" as PIX, so SameBoard never occurs.
* A direct NVLink adds 100 per link that is not Down. go-gpuallocator counts NVLinks whose remote PCI device
  is the other GPU, so links through an NVSwitch (HGX, DGX) count nothing (its own ``TODO(klueska): Handle
  NVSwitch semantics``): NVSwitch pairs score their PCIe level only.
* gputopo records one kind per pair, so an NVLink or NVSwitch pair's PCIe level is not recorded. It is
  inferred from the pair's PCIe links through other GPUs (two GPUs each on one switch with a third share
  that switch: the widest level on the best path) and from NUMA nodes (different: SYS, else NODE),
  whichever is narrower.
* The kubelet sends the available IDs in Go map order (``sets.Set.UnsortedList``), and the policy keeps the
  first of equal-scoring choices, so among ties the real pick is arbitrary. The model lists them by index,
  as go-gpuallocator's own ``Allocator`` does (``SortedSlice``).
* When the best set holds padding (fewer than ``size`` GPUs; possible when the free count is not a multiple
  of ``size``) ``alignedAlloc`` reads the UUID of an empty slot and the plugin fails; the kubelet then fails
  the pod's admission. ``kubelet_choice`` returns None for it, as for too few free GPUs.
* ``iterateGPUPartitions`` appends to a shared Go slice, so with seven or more sets in a partition (14 or
  more free GPUs at size 2) the partition it keeps can be overwritten by a later one; the model keeps the
  intended partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from itertools import combinations
from typing import Final

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.memo import Table
from gputopo.topology.model import PCIE_LEVELS, Topology

__all__ = [
    "MAX_NVLINKS",
    "P2PLinkType",
    "PairScores",
    "Partition",
    "Slot",
    "allocate",
    "kubelet_choice",
    "link_score",
    "p2p_links",
    "pair_scores",
    "partitions",
    "preferred_allocation",
]


class P2PLinkType(IntEnum):
    """go-gpuallocator's ``links.P2PLinkType``; NVLink counts are ``NVLINK + n - 1``."""

    UNKNOWN = 0
    CROSS_CPU = 1
    SAME_CPU = 2
    HOST_BRIDGE = 3
    MULTI_SWITCH = 4
    SINGLE_SWITCH = 5
    SAME_BOARD = 6
    NVLINK = 7  # SingleNVLINKLink; TwoNVLINKLinks is 8 … EighteenNVLINKLinks 24

    @classmethod
    def nvlinks(cls, count: int) -> int:
        """The link type value of ``count`` NVLinks (1..18), as ``GetNVLink`` counts them."""
        if not 1 <= count <= MAX_NVLINKS:
            raise ValueError(f"NVLink count must be 1..{MAX_NVLINKS}, not {count}")
        return cls.NVLINK + count - 1


MAX_NVLINKS: Final = 18
_PCIE_POINTS: Final = {
    P2PLinkType.CROSS_CPU: 10,
    P2PLinkType.SAME_CPU: 20,
    P2PLinkType.HOST_BRIDGE: 30,
    P2PLinkType.MULTI_SWITCH: 40,
    P2PLinkType.SINGLE_SWITCH: 50,
    P2PLinkType.SAME_BOARD: 60,
}
_FROM_PCIE: Final = {
    LinkKind.PIX: P2PLinkType.SINGLE_SWITCH,
    LinkKind.PXB: P2PLinkType.MULTI_SWITCH,
    LinkKind.PHB: P2PLinkType.HOST_BRIDGE,
    LinkKind.NODE: P2PLinkType.SAME_CPU,
    LinkKind.SYS: P2PLinkType.CROSS_CPU,
}
_RANK: Final = {kind: i for i, kind in enumerate(PCIE_LEVELS)}

# A node's pair scores as a matrix: scores[a][b] for GPU indices a, b.
PairScores = tuple[tuple[int, ...], ...]
Slot = int | None  # a GPU index, or None for a padding slot
Partition = tuple[tuple[Slot, ...], ...]


def link_score(link: int) -> int:
    """``calculateGPUPairScore``'s points for one link type (0 for Unknown)."""
    if link >= P2PLinkType.NVLINK:
        return 100 * (link - P2PLinkType.NVLINK + 1)
    return _PCIE_POINTS.get(P2PLinkType(link), 0) if link > 0 else 0


def pair_scores(gpu_count: int, links: Mapping[tuple[int, int], Iterable[int]]) -> PairScores:
    """The score of every pair from its links (the P2P links between GPU ``a`` and GPU ``b``, a < b)."""
    rows = [[0] * gpu_count for _ in range(gpu_count)]
    for (a, b), types in links.items():
        score = sum(link_score(t) for t in types)
        rows[a][b] = rows[b][a] = score
    return tuple(tuple(row) for row in rows)


def _pcie_levels(topology: Topology) -> dict[tuple[int, int], LinkKind]:
    """Every pair's PCIe level: its own when the topology records one, else the narrowest of the level reachable
    through other GPUs' recorded levels (the widest step on the best path) and what the NUMA nodes say
    (different: SYS, else NODE)."""
    n = topology.gpu_count
    worst = len(PCIE_LEVELS)
    level = [[worst] * n for _ in range(n)]
    for (a, b), link in topology.links.items():
        if link.kind in _RANK:
            level[a][b] = level[b][a] = _RANK[link.kind]
    for via in range(n):
        row = level[via]
        for a in range(n):
            to_via = level[a][via]
            if to_via == worst:
                continue
            for b in range(n):
                step = max(to_via, row[b])
                if step < level[a][b]:
                    level[a][b] = step
    out: dict[tuple[int, int], LinkKind] = {}
    for a in range(n):
        for b in range(a + 1, n):
            na, nb = topology.gpus[a].numa_node, topology.gpus[b].numa_node
            numa = LinkKind.SYS if na is not None and nb is not None and na != nb else LinkKind.NODE
            # A path through SYS links says less than the NUMA nodes do.
            out[(a, b)] = PCIE_LEVELS[min(level[a][b], _RANK[numa])]
    return out


def p2p_links(topology: Topology) -> dict[tuple[int, int], tuple[int, ...]]:
    """The P2P links go-gpuallocator would read from NVML for every pair (see the module notes)."""
    levels = _pcie_levels(topology)
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for key, level in levels.items():
        link = topology.links[key]
        types: tuple[int, ...] = (_FROM_PCIE[level],)
        if link.kind is LinkKind.NVLINK and link.usable_nvlink and link.nvlinks > 0:
            types = (*types, P2PLinkType.nvlinks(min(link.nvlinks, MAX_NVLINKS)))
        out[key] = types
    return out


_SCORES: Table[None, PairScores] = Table("device plugin pair scores")
_CHOICES: Table[tuple[tuple[int, ...], tuple[int, ...], int], tuple[Slot, ...]] = Table("device plugin choices")


def _scores_of(topology: Topology) -> PairScores:
    table = topology.memo.table(_SCORES)
    found = table.get(None)
    if found is None:
        found = table[None] = pair_scores(topology.gpu_count, p2p_links(topology))
    return found


def partitions(
    available: Sequence[int], size: int, descend: Callable[[Partition, Sequence[Slot]], bool] | None = None
) -> Iterator[Partition]:
    """``iterateGPUPartitions``: every partition of ``available`` (padded) into sets of ``size``, in Go's order.

    ``descend(sets so far, GPUs left)`` False skips that branch (the caller's bound); None walks them all.
    """
    if size <= 0 or size > len(available):
        return
    if size == 1:
        for device in available:
            yield ((device,),)
        return
    devices: list[Slot] = list(available)
    padding = -len(devices) % size
    devices += [None] * padding

    def walk(remaining: list[Slot], accum: Partition) -> Iterator[Partition]:
        if descend is not None and not descend(accum, remaining):
            return
        if len(remaining) == size:
            yield (*accum, tuple(remaining))
            return
        first = remaining[0]
        for others in combinations(remaining[1:], size - 1):
            group = (first, *others)
            if group.count(None) not in (0, padding):
                continue  # padding goes into one set, all of it
            yield from walk([g for g in remaining if g not in group], (*accum, group))

    yield from walk(devices, ())


def _set_score(scores: PairScores, gpus: Sequence[Slot]) -> int:
    real = [g for g in gpus if g is not None]
    return sum(scores[a][b] for a, b in combinations(real, 2))


def _holds(group: Sequence[Slot], required: Sequence[int]) -> bool:
    return all(r in group for r in required)


def _bound(scores: PairScores, remaining: Sequence[Slot], size: int) -> int:
    """An upper bound on the score of any partition of ``remaining``: each GPU's best ``size - 1`` partners."""
    real = [g for g in remaining if g is not None]
    total = 0
    for a in real:
        row = scores[a]
        total += sum(sorted((row[b] for b in real if b != a), reverse=True)[: size - 1])
    return total // 2


def allocate(scores: PairScores, available: Sequence[int], required: Sequence[int], size: int) -> tuple[Slot, ...]:
    """``bestEffortPolicy.Allocate``: the set it returns (None for a padding slot), () when it returns none.

    ``available`` is in the order the plugin received it; ``required`` are the must-include devices.
    """
    if size <= 0 or len(available) < size or len(required) > size or len(required) > len(available):
        return ()
    best: Partition | None = None
    best_score = 0

    def descend(accum: Partition, remaining: Sequence[Slot]) -> bool:
        # Skip a branch only when it cannot beat the best so far: an equal score never replaces the first.
        if best is None or size == 1:
            return True
        so_far = sum(_set_score(scores, group) for group in accum)
        return so_far + _bound(scores, remaining, size) > best_score

    for candidate in partitions(available, size, descend):
        if not any(None not in group and _holds(group, required) for group in candidate):
            continue
        total = sum(_set_score(scores, group) for group in candidate)
        if best is None or total > best_score:
            best, best_score = candidate, total
    holding = [group for group in best or () if _holds(group, required)]
    if not holding:
        return ()
    chosen = holding[0]
    chosen_score = _set_score(scores, chosen)
    for group in holding[1:]:
        group_score = _set_score(scores, group)
        if group_score > chosen_score:
            chosen, chosen_score = group, group_score
    return chosen


def preferred_allocation(
    topology: Topology, available: Iterable[int], size: int, required: Iterable[int] = ()
) -> tuple[Slot, ...]:
    """What the plugin's best-effort policy answers on this node (see ``allocate``); memoised per topology.

    ``available`` is taken in index order (the module notes say why); ``required`` devices must be in it.
    """
    key = (tuple(sorted(set(available))), tuple(sorted(set(required))), size)
    table = topology.memo.table(_CHOICES)
    found = table.get(key)
    if found is None:
        found = table[key] = allocate(_scores_of(topology), key[0], key[1], size)
    return found


def kubelet_choice(topology: Topology, free: Iterable[int], size: int) -> tuple[int, ...] | None:
    """The GPUs the kubelet gives a container asking for ``size`` of the node's ``free`` GPUs, ascending.

    The plugin's preferred set; None when the kubelet cannot admit the container (too few free GPUs, or the
    plugin's answer holds a padding slot, which makes it fail).
    """
    chosen = preferred_allocation(topology, free, size)
    if len(chosen) != size or any(g is None for g in chosen):
        return None
    return tuple(sorted(g for g in chosen if g is not None))
