"""Properties of the chosen victims on random small clusters: every victim has lower priority, and the set is
minimal: with any one victim left running the preemptor no longer places in the chosen domain at the plan's bus
bandwidth. The preemptor is a gang of one GPU shape or of several, each rank given its shape."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import node, snapshot
from preemption_builders import gang, running, shaped

from gputopo.placement import Placement, Snapshot, place
from gputopo.placement.preemption import PreemptionPlan, PreemptionRules, RunningGang, plan_preemption
from gputopo.placement.shapes import place_shapes

TIER0 = "fabric.topograph.run/tier-0"


@st.composite
def scenes(draw: st.DrawFn) -> tuple[Snapshot, list[RunningGang]]:
    count = draw(st.integers(1, 4))
    builders = [node(f"n{i}").leaf(f"leaf-{i % 2}") for i in range(count)]
    gangs = []
    for i in range(count):
        gpus = list(range(8))
        k = 0
        while gpus:
            size = min(len(gpus), draw(st.sampled_from([1, 2, 4, 8])))
            taken, gpus = gpus[:size], gpus[size:]
            if draw(st.booleans()) or not gpus:
                b = gang(f"g{i}-{k}", draw(st.integers(0, 3))).on(f"n{i}", *taken).started(draw(st.integers(0, 9000)))
                gangs.append(b)
            k += 1
    return running(snapshot(*builders), *gangs)


SHAPES = [((1, 4),), ((1, 8),), ((2, 8),), ((2, 4),), ((1, 8), (1, 4)), ((1, 4), (2, 2)), ((2, 4), (1, 8))]


@settings(max_examples=60, deadline=None)
@given(scenes(), st.sampled_from(SHAPES), st.integers(1, 4))
def test_victims_lower_priority_and_minimal(
    scene: tuple[Snapshot, list[RunningGang]], shapes: tuple[tuple[int, int], ...], priority: int
) -> None:
    """For a gang of one GPU shape or of several (each placed in turn in the domain)."""
    snap, gangs = scene
    wanted = shaped(*shapes, priority=priority)
    plan = plan_preemption(snap, wanted, gangs, PreemptionRules(now=10_000.0))
    if not isinstance(plan, PreemptionPlan):
        return
    assert all(v.priority < priority for v in plan.victims)
    domain = {snap.nodes[i].name for i in plan.domain.nodes}
    assert {w.node for w in plan.placement.workers} <= domain
    gpus = {w.rank: len(w.gpus) for w in plan.placement.workers}
    assert gpus == {r: s.request.gpus_per_worker for s in wanted.shapes for r in s.ranks}

    def places_without(dropped: str) -> bool:
        """Whether the preemptor places in the domain with only the other victims gone, at no worse bus bandwidth
        than the plan gives it (a victim is kept when sparing it would spread the gang thinner)."""
        view = snap
        for v in plan.victims:
            if v.name != dropped:
                view = view.release(v.placement)
        inside = Snapshot([n for n in view if n.name in domain], snap.tiers)
        placed = place_shapes(inside, wanted.shapes, place)
        return isinstance(placed, Placement) and placed.busbw_gbps >= plan.placement.busbw_gbps - 1e-6

    assert places_without("")
    for victim in plan.victims:
        assert not places_without(victim.name), f"{victim.name} need not be preempted"
