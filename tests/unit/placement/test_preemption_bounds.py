"""Slot-cost bounds: what clearing a node or a domain costs at least, per priority level."""

from __future__ import annotations

import pytest

from gputopo.placement.preemption.bounds import NodeVictims, domain_bound, slot_costs


@pytest.mark.parametrize(
    ("node", "g", "level", "costs"),
    [
        (NodeVictims(8, ()), 8, 0, []),  # free slots cost nothing and are not listed
        (NodeVictims(0, ((0, 80.0, 8),)), 8, 0, [80.0]),
        (NodeVictims(4, ((0, 40.0, 4),)), 8, 0, [40.0]),
        (NodeVictims(0, ((0, 10.0, 4), (0, 80.0, 4))), 4, 0, [10.0, 80.0]),  # cheapest work per GPU first
        (NodeVictims(0, ((1, 10.0, 4), (0, 80.0, 4))), 4, 0, [80.0]),  # above the level: not a victim
        (NodeVictims(0, ((0, 8.0, 2), (0, 80.0, 6))), 4, 0, [8.0 + 2 * 80.0 / 6, 4 * 80.0 / 6]),  # fractional
    ],
    ids=["free-node", "one-victim", "half-free", "two-slots", "level", "fractional"],
)
def test_slot_costs(node: NodeVictims, g: int, level: int, costs: list[float]) -> None:
    assert slot_costs(node, g, level) == pytest.approx(costs)
    assert node.costs(g, level) == pytest.approx(costs)


def test_domain_bound_lowest_level_then_cheapest_slots() -> None:
    nodes = [NodeVictims(0, ((0, 50.0, 8),)), NodeVictims(0, ((1, 5.0, 8),)), NodeVictims(8, ())]
    assert domain_bound(nodes, 2, 8, [0, 1]) == (0, 50.0)  # priority 0 suffices, though dearer
    assert domain_bound(nodes, 3, 8, [0, 1]) == (1, 55.0)
    assert domain_bound(nodes, 4, 8, [0, 1]) is None
    assert domain_bound(nodes, 1, 8, [0, 1]) == (-(2**62), 0.0)
