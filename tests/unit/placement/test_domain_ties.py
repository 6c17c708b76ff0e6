"""When bus bandwidth ties, the engine breaks the smallest free NVLink domain: a 2-GPU job goes to an NVLink pair
before it cuts into a whole NVSwitch node, which stays whole for the 8-GPU gang that needs it."""

from __future__ import annotations

import pytest
from placement_builders import node, snapshot

from gputopo.api.trainingjob import IntraNode
from gputopo.placement import Placement, Request, place
from gputopo.placement.scores import NodeScores
from gputopo.topology.catalog import load_node_type


@pytest.mark.parametrize(
    ("node_type", "used", "expected"),
    [
        ("dgx-a100", (), 8),
        ("dgx-a100", (0, 1), 6),
        ("h100-nvl-pairs", (), 2),
        ("h100-nvl-pairs", (0, 2, 4, 6), 1),
        ("dgx1-v100", (), 4),
        ("l40s-pcie", (), 1),
    ],
    ids=["nvswitch", "nvswitch-partly-used", "nvlink-pairs", "pairs-each-half-used", "cube-mesh-quads", "pcie"],
)
def test_the_largest_free_nvlink_domain_of_a_node(node_type: str, used: tuple[int, ...], expected: int) -> None:
    scores = NodeScores(load_node_type(node_type))
    free = sum(1 << g for g in range(scores.topology.gpu_count) if g not in used)
    assert scores.domain(free) == expected


@pytest.mark.parametrize(
    ("node_type", "taken", "expected"),
    [("dgx-a100", (0, 1), 8), ("dgx-a100", tuple(range(8)), 8), ("h100-nvl-pairs", (0, 1), 0)],
    ids=["a-pair-of-an-nvswitch-node", "the-whole-nvswitch-node", "a-whole-nvlink-pair"],
)
def test_what_a_pick_breaks(node_type: str, taken: tuple[int, ...], expected: int) -> None:
    scores = NodeScores(load_node_type(node_type))
    assert scores.broken(0xFF, sum(1 << g for g in taken)) == expected


@pytest.mark.parametrize("first", ["dgx", "nvl"], ids=["nvswitch-node-first", "nvlink-pairs-first"])
@pytest.mark.parametrize("intra", [IntraNode.NVLINK, IntraNode.ANY], ids=["nvlink", "any"])
def test_a_pair_at_the_same_bandwidth_goes_to_an_nvlink_pair_not_a_whole_nvswitch_node(
    first: str, intra: IntraNode
) -> None:
    nodes = [node("dgx", "dgx-a100"), node("nvl", "h100-nvl-pairs")]
    snap = snapshot(*(nodes if first == "dgx" else reversed(nodes)))
    pair = place(snap, Request(1, 2, intra_node=intra))
    assert isinstance(pair, Placement)
    on_dgx = place(snapshot(node("dgx", "dgx-a100")), Request(1, 2, intra_node=intra))
    assert isinstance(on_dgx, Placement) and round(on_dgx.busbw_gbps, 6) == round(pair.busbw_gbps, 6)  # a tie
    assert [w.node for w in pair.workers] == ["nvl"]
    whole = place(snap.reserve(pair), Request(1, 8, intra_node=IntraNode.NVSWITCH))
    assert isinstance(whole, Placement) and [w.node for w in whole.workers] == ["dgx"]


def test_bandwidth_still_comes_first() -> None:
    """A faster pair on an NVSwitch node wins over a slower NVLink pair: the tie-break only breaks ties."""
    pair = place(snapshot(node("nvl", "h100-nvl-pairs"), node("hgx", "hgx-h100")), Request(1, 2))
    assert isinstance(pair, Placement) and [w.node for w in pair.workers] == ["hgx"]


def test_within_one_model_the_node_whose_domain_is_already_cut_is_taken() -> None:
    snap = snapshot(node("whole", "dgx-a100"), node("cut", "dgx-a100").used(0, 1, 2, 3))
    pair = place(snap, Request(1, 2))
    assert isinstance(pair, Placement) and [w.node for w in pair.workers] == ["cut"]
