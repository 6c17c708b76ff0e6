"""A gang of exclusive parts preempts: each part in a domain of its exclusive label no other part uses, a part at a
time, the victims of every part one plan."""

from __future__ import annotations

from dataclasses import replace

from placement_builders import NodeBuilder, node, snapshot
from preemption_builders import GangBuilder, exclusive, gang, running

from gputopo.placement import Snapshot
from gputopo.placement.preemption import (
    NoPreemption,
    PreemptionPlan,
    PreemptionRules,
    RunningGang,
    gpus_by_node,
    plan_exclusive_preemption,
    plan_preemption,
)
from gputopo.placement.preemption.exclusive import EXCLUSIVE

POOL = "example.com/pool"
NOW = PreemptionRules(now=10_000.0)


def _plan(result: PreemptionPlan | NoPreemption) -> PreemptionPlan:
    assert isinstance(result, PreemptionPlan), str(result)
    return result


def _pool(pool: str, nodes: int = 2, node_type: str = "hgx-h100") -> list[NodeBuilder]:
    return [node(f"{pool}{i}", node_type).leaf(f"leaf-{pool}").label(POOL, pool) for i in range(nodes)]


def _full(
    *gangs: GangBuilder, pools: str = "ab", extra: tuple[NodeBuilder, ...] = ()
) -> tuple[Snapshot, list[RunningGang]]:
    nodes = [n for pool in pools for n in _pool(pool)]
    return running(snapshot(*nodes, *extra), *gangs)


def _whole(name: str, at: float, node_name: str, priority: int = 0) -> GangBuilder:
    """An 8-GPU gang on one node, started at ``at``."""
    return gang(name, priority).on(node_name, *range(8)).started(at)


def _pools_of(plan: PreemptionPlan, snap: Snapshot) -> dict[int, str]:
    """Each rank's pool."""
    return {w.rank: snap.node(w.node).labels[POOL] for w in plan.placement.workers}


def test_two_parts_take_one_pool_each_with_the_fewest_and_cheapest_victims() -> None:
    """Both pools are full of whole-node gangs of lower priority. Each 8-GPU part ends one gang: the newest of
    pool a (least work lost) for the first part, the newest of pool b for the second, never two in one pool."""
    snap, gangs = _full(
        _whole("a-old", 0, "a0"),
        _whole("a-new", 9_000, "a1"),
        _whole("b-old", 5_000, "b0"),
        _whole("b-new", 8_000, "b1"),
    )
    wanted = exclusive(POOL, (1, 8), (1, 8))
    plan = _plan(plan_exclusive_preemption(snap, wanted, gangs, NOW))
    assert [v.name for v in plan.victims] == ["a-new", "b-new"]
    assert _pools_of(plan, snap) == {0: "a", 1: "b"}
    assert {w.node for w in plan.placement.workers} == {"a1", "b1"}
    assert plan.domain.level == EXCLUSIVE and plan.domain.name == f"{POOL}=a, {POOL}=b"
    assert sorted(snap.nodes[i].name for i in plan.domain.nodes) == ["a0", "a1", "b0", "b1"]
    assert plan.cost.highest_priority == 0
    assert plan.cost.work_lost_gpu_s == 8 * 1_000 + 8 * 2_000
    assert plan.cost.gangs_broken == 2
    # The nomination holds every part's GPUs.
    assert plan.nomination.gpus == {"a1": frozenset(range(8)), "b1": frozenset(range(8))}
    # plan_preemption plans such a gang the same way.
    assert plan_preemption(snap, wanted, gangs, NOW) == plan


def test_a_part_that_fits_free_ends_no_gang() -> None:
    """Pool a has a free node: the first part takes it at no cost, the second preempts in pool b alone."""
    snap, gangs = _full(_whole("a-busy", 9_000, "a1"), _whole("b-old", 5_000, "b0"), _whole("b-new", 8_000, "b1"))
    plan = _plan(plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8)), gangs, NOW))
    assert [v.name for v in plan.victims] == ["b-new"]
    assert {w.rank: w.node for w in plan.placement.workers} == {0: "a0", 1: "b1"}
    assert plan.cost.work_lost_gpu_s == 8 * 2_000 and plan.cost.gangs_broken == 1


def test_a_victim_in_two_pools_is_ended_once_and_frees_both() -> None:
    """A 16-GPU gang on a0 and b0 is the cheapest room in pool a; ended for the first part, its GPUs on b0 hold the
    second part with no other victim."""
    snap, gangs = _full(
        gang("wide", 0).on("a0", *range(8)).on("b0", *range(8)).started(9_000),
        _whole("a-old", 0, "a1"),
        _whole("b-old", 0, "b1"),
    )
    plan = _plan(plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8)), gangs, NOW))
    assert [v.name for v in plan.victims] == ["wide"]
    assert {w.rank: w.node for w in plan.placement.workers} == {0: "a0", 1: "b0"}
    assert plan.cost.gangs_broken == 1 and plan.cost.work_lost_gpu_s == 16 * 1_000


def test_a_part_with_no_domain_left_names_the_part() -> None:
    snap, gangs = _full(*(_whole(f"{n}-gang", 9_000, n) for n in ("a0", "a1", "b0", "b1")))
    refused = plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8), (1, 8)), gangs, NOW)
    assert isinstance(refused, NoPreemption)
    assert refused.reason.startswith(f"part p-2: no domain of {POOL} is left for it: the other parts take all 2")
    nowhere = plan_exclusive_preemption(snap, exclusive("example.com/rack", (1, 8)), gangs, NOW)
    assert isinstance(nowhere, NoPreemption) and nowhere.reason == "part p-0: no node carries label example.com/rack"


def test_nodes_without_the_label_are_never_used() -> None:
    """Half a node outside every pool is free: no room for a part, but the 4-GPU rank outside every part (a
    driver) takes it."""
    outside = node("x0").leaf("leaf-x")
    snap, gangs = _full(
        *(_whole(f"{n}-gang", 9_000, n) for n in ("a0", "a1", "b0", "b1")),
        gang("x-high", 20).on("x0", 0, 1, 2, 3),
        extra=(outside,),
    )
    plan = _plan(plan_exclusive_preemption(snap, exclusive(POOL, (1, 4), (1, 4)), gangs, NOW))
    assert "x0" not in gpus_by_node(plan.placement) and len(plan.victims) == 2
    assert set(_pools_of(plan, snap).values()) == {"a", "b"}
    mixed = exclusive(POOL, (1, 4, ""), (1, 8), (1, 8))  # a driver rank outside every part, then two parts
    plan = _plan(plan_exclusive_preemption(snap, mixed, gangs, NOW))
    by_rank = {w.rank: w for w in plan.placement.workers}
    assert (by_rank[0].node, by_rank[0].gpus) == ("x0", (4, 5, 6, 7))
    assert {snap.node(by_rank[r].node).labels[POOL] for r in (1, 2)} == {"a", "b"}
    assert len(plan.victims) == 2


def test_equal_priority_is_never_preempted() -> None:
    """Pool b runs gangs of the preemptor's own priority: its second part finds no pool; with a third pool of lower
    priority it takes that one."""
    same = [_whole("b0-same", 9_000, "b0", priority=10), _whole("b1-same", 9_000, "b1", priority=10)]
    low = [_whole("a0-low", 0, "a0"), _whole("a1-low", 0, "a1")]
    snap, gangs = _full(*low, *same)
    refused = plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8)), gangs, NOW)
    assert isinstance(refused, NoPreemption)
    assert refused.reason.startswith("part p-1: no domain holds it even with every lower-priority gang preempted")
    assert refused.details == ("2 gangs of equal or higher priority",)
    snap, gangs = _full(*low, *same, _whole("c0-low", 0, "c0"), _whole("c1-low", 0, "c1"), pools="abc")
    plan = _plan(plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8)), gangs, NOW))
    assert all(v.priority < 10 for v in plan.victims) and len(plan.victims) == 2
    assert set(_pools_of(plan, snap).values()) == {"a", "c"}


def _small_gangs() -> tuple[Snapshot, list[RunningGang]]:
    """Pools a and b of one node each, each node running four 2-GPU gangs."""
    nodes = [*_pool("a", 1), *_pool("b", 1)]
    small = [gang(f"{n}-{g}", 0).on(n, 2 * g, 2 * g + 1).started(9_000) for n in ("a0", "b0") for g in range(4)]
    return running(snapshot(*nodes), *small)


def test_max_victims_bounds_every_parts_victims_together() -> None:
    snap, gangs = _small_gangs()
    wanted = exclusive(POOL, (1, 8), (1, 8))
    plan = _plan(plan_exclusive_preemption(snap, wanted, gangs, replace(NOW, max_victims=8)))
    assert len(plan.victims) == 8 and plan.cost.gangs_broken == 8
    refused = plan_exclusive_preemption(snap, wanted, gangs, replace(NOW, max_victims=7))
    assert isinstance(refused, NoPreemption)
    assert refused.reason.startswith("part p-1: in each domain of example.com/pool b: no domain holds it within 3")


def test_the_rules_of_any_preemptor_hold() -> None:
    snap, gangs = _full(*(_whole(f"{n}-gang", 9_000, n) for n in ("a0", "a1", "b0", "b1")))
    never = plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8), never=True), gangs, NOW)
    assert isinstance(never, NoPreemption) and "preemptionPolicy is Never" in never.reason
    protected = plan_exclusive_preemption(snap, exclusive(POOL, (1, 8), (1, 8), preempted_at=9_900), gangs, NOW)
    assert isinstance(protected, NoPreemption) and protected.reason.startswith("it was preempted 100 s ago")


def test_it_waits_for_the_checkpoint_of_every_parts_victims_together() -> None:
    """Each pool's gang checkpoints every 1000 s and is 900 s past its last: 100 s from now both lose nothing."""
    gangs = [_whole(f"{n}-gang", 0, n).every(1_000) for n in ("a0", "a1", "b0", "b1")]
    snap, running_gangs = _full(*gangs)
    rules = replace(NOW, now=10_900.0)
    wanted = exclusive(POOL, (1, 8), (1, 8), checkpoint_wait=600)
    waits = plan_exclusive_preemption(snap, wanted, running_gangs, rules)
    assert isinstance(waits, NoPreemption) and waits.retry_at == 11_000.0
    assert len(waits.details) == 2
    now = _plan(plan_exclusive_preemption(snap, replace(wanted, checkpoint_wait_s=0.0), running_gangs, rules))
    assert now.cost.work_lost_gpu_s == 2 * 8 * 900


def test_a_plan_the_gang_would_not_find_again_on_its_nominated_gpus_is_refused() -> None:
    """A 4-GPU part then an 8-GPU part. Pool a's node (NVLink pairs) has 4 GPUs under a higher-priority gang, so the
    4-GPU part takes its other 4 and the 8-GPU part pool b's NVSwitch node. On those GPUs alone the gang is placed
    part by part, the best domain first: the 4-GPU part would take pool b's node, leaving the 8-GPU part 4 GPUs. No
    gang is ended for a nomination that would lapse."""
    nodes = [node("a0", "h100-nvl-pairs").leaf("leaf-a").label(POOL, "a"), *_pool("b", 1)]
    snap, gangs = running(
        snapshot(*nodes),
        gang("a-high", 20).on("a0", 0, 1, 2, 3).started(0),
        gang("a-low", 0).on("a0", 4, 5, 6, 7).started(9_000),
        _whole("b-low", 9_000, "b0"),
    )
    refused = plan_exclusive_preemption(snap, exclusive(POOL, (1, 4), (1, 8)), gangs, NOW)
    assert isinstance(refused, NoPreemption)
    assert "part p-1 would find no domain of example.com/pool left on the nominated GPUs" in refused.reason
