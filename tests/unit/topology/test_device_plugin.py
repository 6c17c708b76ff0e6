"""The device plugin's best-effort choice: go-gpuallocator's own test cases, then gputopo's link mapping.

The first part ports ``gpuallocator/besteffort_test.go`` (NVIDIA/go-gpuallocator 876e7b7) with its node
fixtures from ``common_test.go``: the DGX-1 Volta and Pascal nodes and a 4x RTX 8000 box, as P2P link types.
Go's ``iterateGPUSets`` is ``itertools.combinations`` here and has no test of its own.
"""

from __future__ import annotations

import pytest
from topo_builders import node

from gputopo.api.nodetopology import LinkKind
from gputopo.topology import Gpu, Link, Topology
from gputopo.topology.device_plugin import (
    P2PLinkType,
    PairScores,
    allocate,
    kubelet_choice,
    p2p_links,
    pair_scores,
    partitions,
    preferred_allocation,
)

CROSS, SAME_CPU = P2PLinkType.CROSS_CPU, P2PLinkType.SAME_CPU
HB, SS = P2PLinkType.HOST_BRIDGE, P2PLinkType.SINGLE_SWITCH


def _node(nvlinks: dict[tuple[int, int], int], p2p: dict[tuple[int, int], P2PLinkType], n: int = 8) -> PairScores:
    links: dict[tuple[int, int], list[int]] = {}
    for key, kind in p2p.items():
        links.setdefault(key, []).append(kind)
    for key, count in nvlinks.items():
        links.setdefault(key, []).append(P2PLinkType.nvlinks(count))
    return pair_scores(n, links)


def _quads(inside: dict[tuple[int, int], P2PLinkType]) -> dict[tuple[int, int], P2PLinkType]:
    """The P2P links of a DGX-1: ``inside`` for each socket's four GPUs, CrossCPU between the sockets."""
    out = dict(inside)
    out.update({(a + 4, b + 4): kind for (a, b), kind in inside.items()})
    out.update({(a, b): CROSS for a in range(4) for b in range(4, 8)})
    return out


DGX1_VOLTA = _node(
    {
        (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
        (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,
    },
    _quads({(0, 1): SS, (0, 2): HB, (0, 3): HB, (1, 2): HB, (1, 3): HB, (2, 3): SS}),
)  # fmt: skip
DGX1_PASCAL = _node(
    {
        (0, 1): 1, (0, 2): 1, (0, 3): 1, (0, 4): 1, (1, 2): 1, (1, 3): 1, (1, 5): 1, (2, 3): 1,
        (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 1, (5, 6): 1, (5, 7): 1, (6, 7): 1,
    },
    _quads({(0, 1): HB, (0, 2): SS, (0, 3): HB, (1, 2): HB, (1, 3): SS, (2, 3): HB}),
)  # fmt: skip
RTX8000 = _node({(0, 3): 2, (1, 2): 2}, {(0, 1): SAME_CPU, (0, 2): CROSS, (1, 3): CROSS, (2, 3): SAME_CPU}, n=4)


@pytest.mark.parametrize(
    ("available", "required", "size", "expected"),
    [
        ([0, 2, 4, 5], [], 2, [4, 5]),
        ([0, 4, 5, 6], [], 2, [5, 6]),
        ([0, 3, 1], [], 2, [0, 3]),
        ([0, 1, 4], [], 2, [0, 4]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [4], 1, [4]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [4], 2, [4, 7]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [4], 4, [4, 5, 6, 7]),
        ([1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], 4, []),
        ([0, 1, 2, 3, 4, 5, 6, 7], [0, 2, 4, 6], 4, [0, 2, 4, 6]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6], 4, []),
        ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], 1, []),
    ],
    ids=[
        "single-nvlink-prefer-same-switch",
        "single-nvlink-prefer-same-socket",
        "prefer-dual-nvlink-same-socket",
        "prefer-dual-nvlink-cross-socket",
        "must-include-with-allocation-size-1",
        "must-include-with-allocation-size-2",
        "must-include-with-allocation-size-4",
        "must-include-with-unavailable-device",
        "must-include-with-full-set-specified",
        "must-include-with-too-many-devices-specified",
        "required-more-devices-than-available",
    ],
)
def test_best_effort_allocate(available: list[int], required: list[int], size: int, expected: list[int]) -> None:
    assert sorted(g for g in allocate(DGX1_VOLTA, available, required, size) if g is not None) == expected


@pytest.mark.parametrize(
    ("scores", "steps"),
    [
        (RTX8000, [(1, [0]), (1, [1]), (1, [2]), (1, [3]), (1, [])]),
        (RTX8000, [(2, [0, 3]), (2, [1, 2]), (1, [])]),
        (RTX8000, [(4, [0, 1, 2, 3]), (1, [])]),
        (DGX1_PASCAL, [(1, [g]) for g in range(8)] + [(1, [])]),
        (DGX1_PASCAL, [(2, [0, 2]), (2, [1, 3]), (2, [4, 6]), (2, [5, 7]), (1, [])]),
        (DGX1_PASCAL, [(4, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (1, [])]),
        (DGX1_PASCAL, [(8, list(range(8))), (1, [])]),
        (DGX1_VOLTA, [(1, [g]) for g in range(8)] + [(1, [])]),
        (DGX1_VOLTA, [(2, [0, 3]), (2, [1, 2]), (2, [4, 7]), (2, [5, 6]), (1, [])]),
        (DGX1_VOLTA, [(4, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (1, [])]),
        (DGX1_VOLTA, [(8, list(range(8))), (1, [])]),
    ],
    ids=[
        "4x-rtx8000-alloc-one",
        "4x-rtx8000-alloc-two",
        "4x-rtx8000-alloc-four",
        "dgx1-pascal-alloc-one",
        "dgx1-pascal-alloc-two",
        "dgx1-pascal-alloc-four",
        "dgx1-pascal-alloc-eight",
        "dgx1-volta-alloc-one",
        "dgx1-volta-alloc-two",
        "dgx1-volta-alloc-four",
        "dgx1-volta-alloc-eight",
    ],
)
def test_best_effort_allocations_one_after_another(scores: PairScores, steps: list[tuple[int, list[int]]]) -> None:
    """go-gpuallocator's ``Allocator``: each allocation from what is left, listed by index."""
    remaining = list(range(len(scores)))
    for size, expected in steps:
        got = [g for g in allocate(scores, remaining, [], size) if g is not None]
        assert sorted(got) == expected
        remaining = [g for g in remaining if g not in got]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, []),
        (1, [((0,),), ((1,),), ((2,),), ((3,),)]),
        (2, [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]),
        (
            3,
            [
                ((0, 1, 2), (3, None, None)),
                ((0, 1, 3), (2, None, None)),
                ((0, 2, 3), (1, None, None)),
                ((0, None, None), (1, 2, 3)),
            ],
        ),
        (4, [((0, 1, 2, 3),)]),
        (5, []),
    ],
    ids=["iterate-0", "iterate-1", "iterate-2", "iterate-3", "iterate-4", "iterate-too-many"],
)
def test_best_effort_iterate_gpu_partitions(size: int, expected: list[tuple[tuple[int | None, ...], ...]]) -> None:
    """Go's test sorts before comparing; this walk keeps Go's order, which decides ties, so it is compared as is."""
    assert list(partitions([0, 1, 2, 3], size)) == expected


# -- gputopo's topologies as the plugin reads them ---------------------------------------------------------


def _topology(links: list[Link], numa: list[int | None]) -> Topology:
    return Topology.build([Gpu(i, numa_node=n) for i, n in enumerate(numa)], links)


@pytest.mark.parametrize(
    ("topology", "a", "b", "expected"),
    [
        (node(4).all("NODE").nvlink(0, 1, 4).build(), 0, 1, (SAME_CPU, P2PLinkType.nvlinks(4))),
        (node(4).all("NODE").nvlink(0, 1, 4, "Down").build(), 0, 1, (SAME_CPU,)),
        (node(3).pcie(0, 2, "PIX").pcie(1, 2, "PIX").nvlink(0, 1, 2).build(), 0, 1, (SS, P2PLinkType.nvlinks(2))),
        (node(3).pcie(0, 2, "PIX").pcie(1, 2, "PHB").nvlink(0, 1, 2).build(), 0, 1, (HB, P2PLinkType.nvlinks(2))),
        (node(4).nvswitch(18).build(), 0, 3, (SAME_CPU,)),
        (
            _topology([Link(0, 1, LinkKind.NVSWITCH, 18)], [0, 1]),
            0,
            1,
            (CROSS,),
        ),
        (node(2).nvlink(0, 1, 24).build(), 0, 1, (SAME_CPU, P2PLinkType.nvlinks(18))),
        (node(2).pcie(0, 1, "PXB").build(), 0, 1, (P2PLinkType.MULTI_SWITCH,)),
    ],
    ids=[
        "nvlink-adds-100-per-link-to-its-pcie-level",
        "a-down-nvlink-counts-nothing",
        "pcie-level-of-an-nvlink-pair-from-a-shared-switch",
        "pcie-level-of-an-nvlink-pair-is-the-widest-step",
        "nvswitch-pairs-count-no-nvlink",
        "nvswitch-pair-on-two-numa-nodes-is-cross-cpu",
        "at-most-eighteen-nvlinks",
        "pxb-is-multi-switch",
    ],
)
def test_p2p_links_of_a_gputopo_topology(topology: Topology, a: int, b: int, expected: tuple[int, ...]) -> None:
    assert p2p_links(topology)[(a, b)] == expected


def test_a_set_with_padding_makes_the_plugin_fail_so_the_kubelet_gives_nothing() -> None:
    """Five free GPUs, three asked for: the best partition is {0,1,2} + {3,4,pad}, and the padded set scores
    higher. Go returns [3 4 <nil>] (checked against besteffort_policy.go); alignedAlloc then reads a nil."""
    topology = node(5).all("SYS").nvlink(3, 4, 10).build()
    assert preferred_allocation(topology, range(5), 3) == (3, 4, None)
    assert kubelet_choice(topology, range(5), 3) is None


def test_the_kubelet_gets_the_best_effort_choice_in_index_order() -> None:
    topology = node(4).all("SYS").nvlink(0, 3, 2).nvlink(1, 2, 2).build()
    assert kubelet_choice(topology, [3, 2, 1, 0], 2) == (0, 3)
    assert kubelet_choice(topology, [1, 2], 2) == (1, 2)
    assert kubelet_choice(topology, [1], 2) is None


def test_nvlink_size_outside_the_go_constants_is_refused() -> None:
    with pytest.raises(ValueError, match=r"1\.\.18"):
        P2PLinkType.nvlinks(19)
