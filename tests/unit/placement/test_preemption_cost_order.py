"""The cost order (priority, then work lost, then gangs broken) picks the victims, whatever GPUs each holds: gangs
that share an NVSwitch node are told apart by what ending them costs, never by which GPU indices they hold.

Named cases from the peers' preemption suites, replayed with the GPU indices each way round; then a property on
random clusters of NVSwitch nodes: renumbering the GPUs within each node never changes the victims' cost.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import node, snapshot
from preemption_builders import GangBuilder, gang, preemptor, running, shaped

from gputopo.placement.preemption import NoPreemption, PreemptionCost, PreemptionPlan, PreemptionRules, plan_preemption

NOW = 100_000.0
HOUR = 3_600.0
LOW, HIGH = (0, 1, 2, 3), (4, 5, 6, 7)


def _plan(result: PreemptionPlan | NoPreemption) -> PreemptionPlan:
    assert isinstance(result, PreemptionPlan), str(result)
    return result


@pytest.mark.parametrize("first", ["cheap", "dear"], ids=["cheap-on-gpus-0-3", "dear-on-gpus-0-3"])
@pytest.mark.parametrize(
    ("cheap", "dear"),
    [
        (gang("prio-1", 1).started(NOW - HOUR), gang("prio-2", 2).started(NOW - HOUR)),
        (gang("loses-12h", 1).started(NOW - 3 * HOUR), gang("loses-36h", 1).started(NOW - 9 * HOUR)),
        (
            gang("saved-lately", 1).started(0).checkpointed(NOW - 600),
            gang("never-saved", 1).started(NOW - 2 * HOUR),
        ),
    ],
    ids=["priority-1-before-priority-2", "12-gpu-hours-before-36", "checkpointed-before-unsaved"],
)
def test_the_cheaper_of_two_gangs_on_one_node_is_preempted(cheap: GangBuilder, dear: GangBuilder, first: str) -> None:
    """Two 4-GPU gangs share an 8-GPU NVSwitch node; a 4-GPU gang of higher priority needs one of them gone. The
    cheaper goes whichever half of the node it holds (the engine takes the lowest freed GPUs first)."""
    on_low, on_high = (cheap, dear) if first == "cheap" else (dear, cheap)
    on_low.workers, on_high.workers = [], []
    snap, gangs = running(snapshot(node("n0")), on_low.on("n0", *LOW), on_high.on("n0", *HIGH))
    plan = _plan(plan_preemption(snap, preemptor(1, 4), gangs, PreemptionRules(now=NOW)))
    assert [v.name for v in plan.victims] == [cheap.name]


SIZES = [1, 2, 4, 8]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[int, list[tuple[str, int, float, list[tuple[int, list[int]]]]]]:
    """Up to three 8-GPU NVSwitch nodes filled by gangs of 1-8 GPUs (some over two nodes), priorities 0-3, each
    with the GPU slots it holds per node (slot ``s`` of node ``i`` is GPU ``s`` before any renumbering)."""
    count = draw(st.integers(1, 3))
    gangs = []
    for i in range(count):
        slots = list(range(8))
        k = 0
        while slots:
            size = min(len(slots), draw(st.sampled_from(SIZES)))
            taken, slots = slots[:size], slots[size:]
            if draw(st.booleans()) or not slots:
                workers = [(i, taken)]
                gangs.append((f"g{i}-{k}", draw(st.integers(0, 3)), float(draw(st.integers(0, 36)) * HOUR), workers))
            k += 1
    return count, gangs


def _cost(
    count: int,
    gangs: list[tuple[str, int, float, list[tuple[int, list[int]]]]],
    numbering: list[list[int]],
    shapes: tuple[tuple[int, int], ...],
    priority: int,
) -> PreemptionCost | None:
    """The victims' cost with slot ``s`` of node ``i`` held as GPU ``numbering[i][s]``; None when none helps."""
    builders = []
    for name, level, ran, workers in gangs:
        b = gang(name, level).started(NOW - ran)
        for i, slots in workers:
            b.on(f"n{i}", *sorted(numbering[i][s] for s in slots))
        builders.append(b)
    snap, running_gangs = running(snapshot(*(node(f"n{i}") for i in range(count))), *builders)
    found = plan_preemption(snap, shaped(*shapes, priority=priority), running_gangs, PreemptionRules(now=NOW))
    return found.cost if isinstance(found, PreemptionPlan) else None


SHAPES = [((1, 2),), ((1, 4),), ((1, 6),), ((1, 8),), ((2, 4),), ((2, 8),), ((1, 4), (1, 2))]


@settings(max_examples=80, deadline=None)
@given(
    clusters(),
    st.lists(st.permutations(range(8)), min_size=3, max_size=3),
    st.sampled_from(SHAPES),
    st.integers(1, 4),
)
def test_renumbering_gpus_within_nvswitch_nodes_never_changes_the_victims_cost(
    cluster: tuple[int, list[tuple[str, int, float, list[tuple[int, list[int]]]]]],
    numbering: list[list[int]],
    shapes: tuple[tuple[int, int], ...],
    priority: int,
) -> None:
    count, gangs = cluster
    identity = [list(range(8))] * 3
    assert _cost(count, gangs, numbering, shapes, priority) == _cost(count, gangs, identity, shapes, priority)
