"""The cost order (priority, then work lost, then gangs broken) picks the victims, whatever GPUs each holds: gangs
that share an NVSwitch node are told apart by what ending them costs, never by which GPU indices they hold.

Named cases from the peers' preemption suites, replayed with the GPU indices each way round; then a property on
random clusters of NVSwitch nodes: renumbering the GPUs within each node never changes the victims' cost.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from placement_builders import node, snapshot
from preemption_builders import GangBuilder, gang, preemptor, running, shaped

from gputopo.placement.preemption import NoPreemption, PreemptionPlan, PreemptionRules, plan_preemption

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


@pytest.mark.parametrize("reverse", [False, True], ids=["listed-from-gpu-0", "listed-from-gpu-7"])
@pytest.mark.parametrize(
    ("gangs", "gpus", "chosen"),
    [
        ([("pair-a", 2, 4.0, 1), ("pair-b", 2, 4.0, 1), ("quad", 4, 8.0, 1)], 4, ["quad"]),
        ([("quad", 4, 10.0, 1), ("pair-a", 2, 6.0, 1), ("pair-b", 2, 6.0, 1)], 4, ["quad"]),
        ([("quad", 4, 44.0, 2), ("one-a", 1, 11.0, 0), ("pair", 2, 24.0, 0), ("one-b", 1, 18.0, 0)], 2, ["pair"]),
    ],
    ids=["one-gang-not-two-for-the-same-work", "one-gang-losing-less-than-two", "less-work-on-more-gpus"],
)
def test_the_cheapest_set_not_the_cheapest_one_at_a_time(
    gangs: list[tuple[str, int, float, int]], gpus: int, chosen: list[str], reverse: bool
) -> None:
    """Each ``(name, GPUs, GPU-hours lost, priority)`` on a full 8-GPU node. Dropped dearest first, the victims
    kept are the cheapest one at a time, not always the cheapest set (pair-a and pair-b lose as much as quad, in
    two gangs); the set kept is the cheapest of that and of the sets kept densest and smallest first, however
    the gangs lie on the node's GPUs."""
    order = list(range(8))[::-1] if reverse else list(range(8))
    builders = []
    for name, size, gpu_hours, priority in gangs:
        taken, order = order[:size], order[size:]
        builders.append(gang(name, priority).started(NOW - gpu_hours * HOUR / size).on("n0", *taken))
    snap, running_gangs = running(snapshot(node("n0")), *builders)
    plan = _plan(plan_preemption(snap, preemptor(1, gpus), running_gangs, PreemptionRules(now=NOW)))
    assert [v.name for v in plan.victims] == chosen


SIZES = [1, 2, 4, 8]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[int, list[tuple[str, int, float, list[tuple[int, list[int]]]]]]:
    """Up to three 8-GPU NVSwitch nodes filled by gangs of 1-8 GPUs, priorities 0-3, each with the GPU slots it
    holds per node (slot ``s`` of node ``i`` is GPU ``s`` before any renumbering); on two nodes or more, maybe one
    gang over the first two."""
    count = draw(st.integers(1, 3))
    gangs = []
    wide = draw(st.sampled_from([0, 0, 2, 4])) if count > 1 else 0
    if wide:
        held = [(0, list(range(wide))), (1, list(range(wide)))]
        gangs.append(("wide", draw(st.integers(0, 3)), float(draw(st.integers(0, 36)) * HOUR), held))
    for i in range(count):
        slots = list(range(wide if i < 2 else 0, 8))
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
) -> tuple[int, float, int] | None:
    """The victims' cost in the documented order (highest priority, work lost, gangs broken) with slot ``s`` of
    node ``i`` held as GPU ``numbering[i][s]``; None when no preemption helps."""
    builders = []
    for name, level, ran, workers in gangs:
        b = gang(name, level).started(NOW - ran)
        for i, slots in workers:
            b.on(f"n{i}", *sorted(numbering[i][s] for s in slots))
        builders.append(b)
    snap, running_gangs = running(snapshot(*(node(f"n{i}") for i in range(count))), *builders)
    found = plan_preemption(snap, shaped(*shapes, priority=priority), running_gangs, PreemptionRules(now=NOW))
    if not isinstance(found, PreemptionPlan):
        return None
    return found.cost.highest_priority, found.cost.work_lost_gpu_s, found.cost.gangs_broken


SHAPES = [((1, 2),), ((1, 4),), ((1, 6),), ((1, 8),), ((2, 4),), ((2, 8),), ((1, 4), (1, 2))]


TWO_HALVES = (1, [("two", 2, HOUR, [(0, [0, 1, 2, 3])]), ("one", 1, HOUR, [(0, [4, 5, 6, 7])])])
HALVES_SWAPPED = [[4, 5, 6, 7, 0, 1, 2, 3]] * 3


@settings(max_examples=80, deadline=None)
@example(TWO_HALVES, HALVES_SWAPPED, ((1, 4),), 3)  # a priority-2 gang preempted where a priority-1 one would do
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
