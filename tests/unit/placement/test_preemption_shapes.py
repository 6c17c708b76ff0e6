"""A gang of several GPU shapes preempts like any other: every shape placed in turn in the one domain it clears."""

from __future__ import annotations

from placement_builders import node, snapshot
from preemption_builders import GangBuilder, gang, running, shaped

from gputopo.placement import Placement, Snapshot, place
from gputopo.placement.preemption import NoPreemption, PreemptionPlan, PreemptionRules, plan_preemption
from gputopo.placement.shapes import place_shapes

NOW = PreemptionRules(now=10_000.0)


def _plan(result: PreemptionPlan | NoPreemption) -> PreemptionPlan:
    assert isinstance(result, PreemptionPlan), str(result)
    return result


def _two_leaves(a_priority: int = 0, b_priority: int = 0) -> tuple[Snapshot, list[GangBuilder]]:
    """Two leaves of three 8-GPU nodes. Leaf a runs three whole-node gangs started long ago; leaf b two whole-node
    gangs started lately and a 4-GPU gang on b2, whose other 4 GPUs are free."""
    nodes = [node(f"{leaf}{i}").leaf(f"leaf-{leaf}") for leaf in "ab" for i in range(3)]
    gangs = [gang(f"a-old-{i}", a_priority).on(f"a{i}", *range(8)).started(0) for i in range(3)]
    gangs += [gang(f"b-new-{i}", b_priority).on(f"b{i}", *range(8)).started(9_000) for i in range(2)]
    gangs.append(gang("b-small", b_priority).on("b2", 0, 1, 2, 3).started(9_000))
    return snapshot(*nodes), gangs


def test_two_shapes_preempt_the_cheapest_whole_gangs_in_one_domain_each_rank_its_shape() -> None:
    """2 x 8 GPUs and 1 x 4 GPUs under one leaf: leaf b's two newer whole-node gangs go (less work lost than leaf
    a's), the 4-GPU rank takes b2's free half, so b-small keeps running."""
    base, gangs = _two_leaves()
    snap, running_gangs = running(base, *gangs)
    wanted = shaped((2, 8), (1, 4), required_tier=0)
    plan = _plan(plan_preemption(snap, wanted, running_gangs, NOW))
    assert [v.name for v in plan.victims] == ["b-new-0", "b-new-1"]
    assert plan.domain.name == "spine-a/leaf-b" and plan.placement.tier == 0
    by_rank = {w.rank: w for w in plan.placement.workers}
    assert sorted(by_rank) == [0, 1, 2]
    assert [len(by_rank[r].gpus) for r in (0, 1, 2)] == [8, 8, 4]
    assert {by_rank[0].node, by_rank[1].node} == {"b0", "b1"}
    assert (by_rank[2].node, by_rank[2].gpus) == ("b2", (4, 5, 6, 7))
    assert plan.nomination.gpu_count == 20
    # The estimate is the one ``place_shapes`` (as ``plan_gang``) gives on the cleared leaf.
    freed = snap.release(plan.victims[0].placement).release(plan.victims[1].placement)
    cleared = freed.part(list(plan.domain.nodes))
    again = place_shapes(cleared, wanted.shapes, place)
    assert isinstance(again, Placement) and again.busbw_gbps == plan.placement.busbw_gbps


def test_two_shapes_never_preempt_equal_priority() -> None:
    """Leaf b's gangs are of the preemptor's own priority: the older, dearer lower-priority gangs of leaf a go."""
    base, gangs = _two_leaves(a_priority=0, b_priority=10)
    snap, running_gangs = running(base, *gangs)
    plan = _plan(plan_preemption(snap, shaped((2, 8), (1, 4), required_tier=0), running_gangs, NOW))
    assert [v.name for v in plan.victims] == ["a-old-0", "a-old-1", "a-old-2"]
    assert all(v.priority < 10 for v in plan.victims)
    base, gangs = _two_leaves(a_priority=10, b_priority=10)
    snap, running_gangs = running(base, *gangs)
    refused = plan_preemption(snap, shaped((2, 8), (1, 4), required_tier=0), running_gangs, NOW)
    assert isinstance(refused, NoPreemption) and refused.reason == "no running gang may be preempted for it"


def test_two_shapes_that_fit_nowhere_even_with_every_lower_gang_ended() -> None:
    """One 8-GPU rank and three 4-GPU ranks (20 GPUs) under one leaf of three nodes, where a higher-priority gang
    holds two GPUs of n1 and of n2: 20 GPUs could be freed, but only four 4-GPU slots beside the 8-GPU node."""
    base = snapshot(*(node(f"n{i}").leaf("leaf-a") for i in range(3)))
    snap, running_gangs = running(
        base,
        gang("low-0", 0).on("n0", *range(8)),
        gang("low-1", 0).on("n1", *range(2, 8)),
        gang("low-2", 0).on("n2", *range(2, 8)),
        gang("high-1", 20).on("n1", 0, 1),
        gang("high-2", 20).on("n2", 0, 1),
    )
    refused = plan_preemption(snap, shaped((1, 8), (3, 4), required_tier=0), running_gangs, NOW)
    assert isinstance(refused, NoPreemption)
    assert refused.reason == "no domain holds it even with every lower-priority gang preempted"
    assert refused.details == ("2 gangs of equal or higher priority",)
