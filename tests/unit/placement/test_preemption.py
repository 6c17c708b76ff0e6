"""Priority and topology-aware preemption: named cases, each built so the wrong choice fails it."""

from __future__ import annotations

import pytest
from placement_builders import node, rack_snapshot, racks, snapshot
from preemption_builders import gang, preemptor, running

from gputopo.placement import Placement, Request, place
from gputopo.placement.preemption import (
    Nomination,
    NoPreemption,
    PreemptionPlan,
    PreemptionRules,
    RunningIndex,
    hold_nominations,
    lapsed_nominations,
    plan_preemption,
    victim_allowance,
)

NOW = PreemptionRules(now=10_000.0)


def _plan(result: PreemptionPlan | NoPreemption) -> PreemptionPlan:
    assert isinstance(result, PreemptionPlan), str(result)
    return result


def _names(plan: PreemptionPlan) -> list[str]:
    return [v.name for v in plan.victims]


def test_full_nvl72_rack_of_small_gangs_fewest_victims_one_rack() -> None:
    """Two full racks: r0 runs 18 one-tray gangs, r1 four four-tray gangs and two one-tray gangs. A 16-tray
    preemptor needs a whole rack (16 trays in use at most, so the other two must go too); the work lost is the
    same in either rack, so it clears r1 with 6 victims, all in that one rack."""
    base = rack_snapshot(*racks(2))
    small = [gang(f"small-{t:02d}").on(f"r0-t{t:02d}", 0, 1, 2, 3) for t in range(18)]
    big = [gang(f"big-{b}").on_each([f"r1-t{4 * b + t:02d}" for t in range(4)], 0, 1, 2, 3) for b in range(4)]
    spare = [gang(f"spare-{t}").on(f"r1-t{t:02d}", 0, 1, 2, 3) for t in (16, 17)]
    snap, gangs = running(base, *small, *big, *spare)
    wanted = preemptor(16, 4)
    assert not isinstance(place(snap, wanted.request), Placement)
    plan = _plan(plan_preemption(snap, wanted, gangs, PreemptionRules(now=NOW.now, max_victims=32)))
    assert _names(plan) == ["big-0", "big-1", "big-2", "big-3", "spare-16", "spare-17"]
    assert {w.node[:2] for w in plan.placement.workers} == {"r1"}
    assert plan.domain.level == "nvlink"
    assert plan.cost.gangs_broken == 6


def test_spine_with_two_half_full_leaves_clears_the_cheaper_leaf() -> None:
    """Two leaves of four nodes, each half used by two one-node gangs; the gang must stay in one leaf. Leaf b's
    gangs started later (less work lost): both go, and the gang lands in leaf b."""
    nodes = [node(f"a{i}").leaf("leaf-a") for i in range(4)] + [node(f"b{i}").leaf("leaf-b") for i in range(4)]
    gangs = [
        gang("a-old-0").on("a0", *range(8)).started(0),
        gang("a-old-1").on("a1", *range(8)).started(0),
        gang("b-new-0").on("b0", *range(8)).started(9_000),
        gang("b-new-1").on("b1", *range(8)).started(9_000),
    ]
    snap, running_gangs = running(snapshot(*nodes), *gangs)
    wanted = preemptor(4, 8, required_tier=0)
    assert not isinstance(place(snap, wanted.request), Placement)
    plan = _plan(plan_preemption(snap, wanted, running_gangs, NOW))
    assert _names(plan) == ["b-new-0", "b-new-1"]
    assert plan.placement.tier == 0
    assert {w.node for w in plan.placement.workers} == {"b0", "b1", "b2", "b3"}


def test_among_the_cheapest_the_best_bus_bandwidth() -> None:
    """Clearing the A100 node or the H100 node costs the same; the H100 node gives the gang more bandwidth
    (the A100 node comes first in the snapshot, so an order-only choice fails)."""
    snap, gangs = running(
        snapshot(node("a100", "dgx-a100"), node("h100")),
        gang("on-a100").on("a100", *range(8)),
        gang("on-h100").on("h100", *range(8)),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["on-h100"]


@pytest.mark.parametrize(
    ("victim", "wanted", "words"),
    [
        (gang("equal", 10), preemptor(1, 8, 10), "1 gang of equal or higher priority"),
        (gang("higher", 11), preemptor(1, 8, 10), "1 gang of equal or higher priority"),
        (gang("marked").non_preemptible(), preemptor(1, 8), "1 gang marked non-preemptible"),
        (gang("young").started(9_500).min_runtime(3_600), preemptor(1, 8), "1 gang within their minimum runtime"),
        (gang("recent").preempted(9_900), preemptor(1, 8), "1 gang protected after a recent preemption"),
        (gang("a"), preemptor(1, 8, preempted_by=frozenset({"a"})), "1 gang preempted the preemptor before"),
    ],
    ids=["equal-priority-never", "higher-priority-never", "non-preemptible", "minimum-runtime", "protected", "cycle"],
)
def test_gangs_that_may_not_be_victims(victim: object, wanted: object, words: str) -> None:
    from preemption_builders import GangBuilder, Preemptor

    assert isinstance(victim, GangBuilder) and isinstance(wanted, Preemptor)
    snap, gangs = running(snapshot(node("n0")), victim.on("n0", *range(8)))
    result = plan_preemption(snap, wanted, gangs, NOW)
    assert isinstance(result, NoPreemption)
    assert any(d.startswith(words) for d in result.details), result


@pytest.mark.parametrize(("preempted_at", "preempts"), [(None, True), (9_800.0, False), (9_700.0, True)])
def test_a_gang_preempted_lately_preempts_nobody_in_turn(preempted_at: float | None, preempts: bool) -> None:
    """A mid gang just preempted by a high one waits for free GPUs for the protection time (300 s) instead of
    ending a low gang in turn: one arrival does not set off a chain down the priorities."""
    from dataclasses import replace

    snap, gangs = running(snapshot(node("n0")), gang("low", 0).on("n0", *range(8)))
    wanted = replace(preemptor(1, 8, 5), preempted_at=preempted_at)
    result = plan_preemption(snap, wanted, gangs, NOW)
    assert isinstance(result, PreemptionPlan) is preempts, result
    if not preempts:
        assert isinstance(result, NoPreemption) and "preempted 200 s ago" in result.reason


def test_preemption_policy_never() -> None:
    snap, gangs = running(snapshot(node("n0")), gang("low").on("n0", *range(8)))
    assert isinstance(plan_preemption(snap, preemptor(1, 8), gangs, NOW), PreemptionPlan)
    result = plan_preemption(snap, preemptor(1, 8, never=True), gangs, NOW)
    assert isinstance(result, NoPreemption) and "Never" in result.reason


def test_minimum_runtime_respected_takes_the_dearer_victim() -> None:
    """The young gang would be cheaper (less work lost) but has not run its minimum runtime."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("young").on("n0", *range(8)).started(9_000).min_runtime(3_600),
        gang("old").on("n1", *range(8)).started(0),
    )
    assert _names(_plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))) == ["old"]
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("young").on("n0", *range(8)).started(9_000),
        gang("old").on("n1", *range(8)).started(0),
    )
    assert _names(_plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))) == ["young"]


def test_checkpoint_time_counts_the_work_lost() -> None:
    """Both started at 0; the one that checkpointed a minute ago loses least."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("plain").on("n0", *range(8)).started(5_000),
        gang("saved").on("n1", *range(8)).started(0).checkpointed(9_940),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["saved"] and plan.cost.work_lost_gpu_s == 8 * 60


def test_lowest_priority_victims_before_less_work() -> None:
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("p1-fresh", 1).on("n0", *range(8)).started(9_999),
        gang("p0-old", 0).on("n1", *range(8)).started(0),
    )
    assert _names(_plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))) == ["p0-old"]


def test_nomination_holds_against_a_backfill_arrival() -> None:
    """n0's GPUs are nominated to ``big`` (its victim still terminating on 0-3); a 4-GPU arrival gets n1's
    GPUs, not n0's free ones, and once the victim is gone ``big`` places on n0."""
    snap, gangs = running(snapshot(node("n0"), node("n1").used(0, 1, 2, 3)), gang("victim").on("n0", 0, 1, 2, 3))
    plan = _plan(plan_preemption(snap, preemptor(1, 8, name="big"), gangs, NOW))
    assert _names(plan) == ["victim"]
    nominations = [plan.nomination]
    arrival = Request(1, 4, name="backfill", same_model=False)
    assert _placed(place(snap, arrival)).nodes == ("n0",)  # what it would take without the nomination
    assert _placed(place(hold_nominations(snap, nominations, for_gang="backfill"), arrival)).nodes == ("n1",)
    gone = snap.release(gangs[0].placement)
    assert not isinstance(place(hold_nominations(gone, nominations, for_gang="tiny"), Request(1, 8)), Placement)
    assert _placed(place(hold_nominations(gone, nominations, for_gang="big"), Request(1, 8, name="big"))).nodes == (
        "n0",
    )


def _placed(result: object) -> Placement:
    assert isinstance(result, Placement), str(result)
    return result


def test_nomination_lapses_when_the_preemptor_goes_or_cannot_use_it() -> None:
    snap = snapshot(node("n0"), node("n1"))
    nomination = Nomination("big", {"n0": frozenset(range(8))})
    assert lapsed_nominations(snap, [nomination], {"big": Request(1, 8, name="big")}) == {}
    assert lapsed_nominations(snap, [nomination], {}) == {"big": "the preemptor is no longer pending"}
    assert "no longer hold" in lapsed_nominations(snap, [nomination], {"big": Request(2, 8, name="big")})["big"]


def test_nominated_gpus_are_not_freed_for_another_preemptor() -> None:
    snap, gangs = running(
        snapshot(node("n0"), node("n1")), gang("a").on("n0", *range(8)), gang("b").on("n1", *range(8))
    )
    held = [Nomination("first", {"n0": frozenset(range(8))})]
    plan = _plan(plan_preemption(snap, preemptor(1, 8, name="second"), gangs, NOW, held))
    assert _names(plan) == ["b"]


def test_a_nominated_preemptor_waits_for_its_victims() -> None:
    """GPUs already nominated to ``big``: it does not preempt again while its victim terminates."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1")), gang("a").on("n0", *range(8)), gang("b").on("n1", *range(8))
    )
    held = [Nomination("big", {"n0": frozenset(range(8))})]
    result = plan_preemption(snap, preemptor(1, 8, name="big"), gangs, NOW, held)
    assert isinstance(result, NoPreemption) and "already nominated" in result.reason


def test_one_index_serves_a_pass() -> None:
    snap, gangs = running(
        snapshot(node("n0"), node("n1")), gang("a").on("n0", *range(8)), gang("b", 5).on("n1", *range(8))
    )
    index = RunningIndex(snap, gangs)
    assert _names(_plan(plan_preemption(index, preemptor(1, 8, 3), rules=NOW))) == ["a"]
    assert _names(_plan(plan_preemption(index, preemptor(1, 8, 9), rules=NOW))) == ["a"]
    assert isinstance(plan_preemption(index, preemptor(1, 8, 0), rules=NOW), NoPreemption)


def test_cycle_refused_among_several() -> None:
    """``a`` preempted ``p`` before: ``p`` takes ``b`` instead, though ``a`` costs less."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("a").on("n0", *range(8)).started(9_999),
        gang("b").on("n1", *range(8)).started(0),
    )
    assert _names(_plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))) == ["a"]
    plan = _plan(plan_preemption(snap, preemptor(1, 8, preempted_by=frozenset({"a"})), gangs, NOW))
    assert _names(plan) == ["b"]


def test_victim_that_can_move_elsewhere_preferred() -> None:
    """Clearing n0 (a 6-GPU and a 2-GPU gang) or n1 (two 4-GPU gangs) loses the same work; n2 has 4 free
    GPUs, where one of n1's gangs moves at once at the same bus bandwidth (or n0's 2-GPU gang), so clearing n1
    costs less: four GPUs' worth of victims wait in the queue instead of six."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1"), node("n2")),
        gang("six").on("n0", 0, 1, 2, 3, 4, 5),
        gang("two").on("n0", 6, 7),
        gang("four-a").on("n1", 0, 1, 2, 3),
        gang("four-b").on("n1", 4, 5, 6, 7),
        gang("high", 99).on("n2", 4, 5, 6, 7),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["four-a", "four-b"]
    assert len(plan.moves) == 1 and plan.moves[0][1].nodes == ("n2",)
    assert (plan.cost.gpus_waiting, plan.cost.gangs_broken) == (4, 2)


def test_a_move_does_not_outweigh_work_lost() -> None:
    """A victim that moves at once still restarts from its checkpoint: clearing n0 loses a minute less of six
    GPUs' work than clearing n1, where one gang could move, so n0 is cleared."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1"), node("n2")),
        gang("six").on("n0", 0, 1, 2, 3, 4, 5).started(60),
        gang("two").on("n0", 6, 7),
        gang("four-a").on("n1", 0, 1, 2, 3),
        gang("four-b").on("n1", 4, 5, 6, 7),
        gang("high", 99).on("n2", 4, 5, 6, 7),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["six", "two"] and plan.cost.gpus_waiting == 6


def test_victims_limited_per_pass() -> None:
    snap, gangs = running(snapshot(node("n0")), *(gang(f"g{i}").on("n0", i) for i in range(8)))
    assert isinstance(plan_preemption(snap, preemptor(1, 8), gangs, NOW), PreemptionPlan)
    result = plan_preemption(snap, preemptor(1, 8), gangs, PreemptionRules(now=NOW.now, max_victims=4))
    assert isinstance(result, NoPreemption) and "within 4 victims" in result.reason


@pytest.mark.parametrize(
    ("left", "per_gang", "allowed"),
    [(16, 64, 64), (16, 8, 8), (15, 64, 15), (3, 2, 2), (0, 64, 0)],
)
def test_victim_allowance_past_the_budget_only_for_a_passs_first(left: int, per_gang: int, allowed: int) -> None:
    """A pass budget of 16: its first preemptor (16 left) may take up to its own bound, later ones what is left."""
    assert victim_allowance(16, left, per_gang) == allowed


def test_never_part_of_a_gang() -> None:
    """A two-node gang with one worker on the node wanted goes whole: both its nodes' GPUs come back."""
    snap, gangs = running(snapshot(node("n0"), node("n1")), gang("wide").on("n0", *range(8)).on("n1", *range(8)))
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["wide"] and plan.victim_gpus == 16


def test_over_the_victim_budget_fewer_larger_gangs() -> None:
    """Four one-GPU gangs that started late (little work lost) and one four-GPU gang that started early share a
    node; the preemptor wants four GPUs. Dearest first keeps the four cheap gangs, over a budget of two
    victims; the pass that drops the smallest first finds the one four-GPU gang, within it."""
    small = [gang(f"small-{i}").on("n0", i).started(9_000) for i in range(4)]
    snap, gangs = running(snapshot(node("n0")), *small, gang("big").on("n0", 4, 5, 6, 7).started(0))
    assert _names(_plan(plan_preemption(snap, preemptor(1, 4), gangs, NOW))) == [f"small-{i}" for i in range(4)]
    plan = _plan(plan_preemption(snap, preemptor(1, 4), gangs, PreemptionRules(now=NOW.now, max_victims=2)))
    assert _names(plan) == ["big"]


@pytest.mark.parametrize(("node_type", "victims"), [("h100-nvl-pairs", ["a-new", "b-new"]), ("hgx-h100", None)])
def test_whole_cluster_when_cheaper_at_no_worse_bandwidth(node_type: str, victims: list[str] | None) -> None:
    """Two spines of two full nodes, an old gang (much work lost) and a new one in each. A switch's plan ends
    both its gangs; across the spines the two new gangs suffice. On nodes whose PCIe pairs bound the bandwidth
    anyway (as low across spines as within one), the cluster-wide plan wins; on NVLink nodes, where it would
    cost the gang three quarters of its bandwidth, the switch's plan stays."""
    nodes = [node(f"{s}{i}", node_type).leaf(f"leaf-{s}", f"spine-{s}") for s in "ab" for i in range(2)]
    gangs = [gang(f"{s}-{age}").on(f"{s}{i}", *range(8)).started(at) for s in "ab" for i, (age, at) in
             enumerate((("old", 0), ("new", 9_000)))]  # fmt: skip
    snap, running_gangs = running(snapshot(*nodes), *gangs)
    plan = _plan(plan_preemption(snap, preemptor(2, 8), running_gangs, NOW))
    if victims is not None:
        assert _names(plan) == victims and plan.domain.level == "cluster"
    else:
        assert len({v.name[0] for v in plan.victims}) == 1 and plan.victim_gpus == 16
        assert plan.placement.busbw_gbps == place(snapshot(nodes[0], nodes[1]), preemptor(2, 8).request).busbw_gbps


def test_across_spines_when_one_spine_would_need_a_higher_priority_victim() -> None:
    """Spine a holds a low gang and a mid one; spine b a low gang and a gang of the preemptor's own priority. One
    spine (the better bus bandwidth) is cleared only by ending the mid gang; across the spines the two low gangs
    suffice. Priority comes first: the two low gangs go, though the gang then crosses the spines."""
    nodes = [node(f"{s}{i}").leaf(f"leaf-{s}", f"spine-{s}") for s in "ab" for i in range(2)]
    gangs = [
        gang("a-low", 0).on("a0", *range(8)).started(9_000),
        gang("a-mid", 5).on("a1", *range(8)).started(9_000),
        gang("b-low", 0).on("b0", *range(8)).started(0),
        gang("b-peer", 10).on("b1", *range(8)).started(0),
    ]
    snap, running_gangs = running(snapshot(*nodes), *gangs)
    wanted = preemptor(2, 8, priority=10)
    plan = _plan(plan_preemption(snap, wanted, running_gangs, NOW))
    assert _names(plan) == ["a-low", "b-low"] and plan.cost.highest_priority == 0
    one_spine = place(snapshot(nodes[0], nodes[1]), wanted.request)
    assert isinstance(one_spine, Placement) and plan.placement.busbw_gbps < one_spine.busbw_gbps


def test_a_wide_gang_costs_a_one_node_domain_all_its_work() -> None:
    """A four-node gang (64,000 GPU-s lost) and a one-node gang (40,000). A one-node preemptor ending the wide
    gang loses all of its work, not the quarter on that node: the one-node gang's node is searched before the
    wide gang's four, though only three domains may be searched (as a 32-node gang's nodes would fill the
    default 24)."""
    snap, gangs = running(
        snapshot(*(node(f"n{i}") for i in range(5))),
        gang("wide").on_each([f"n{i}" for i in range(4)], *range(8)).started(8_000),
        gang("solo").on("n4", *range(8)).started(5_000),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, PreemptionRules(now=NOW.now, max_domains=3)))
    assert _names(plan) == ["solo"] and plan.cost.work_lost_gpu_s == 40_000


def test_a_few_gpu_minutes_more_buy_the_nvswitch_board() -> None:
    """An 8-GPU preemptor: ending the gang on the PCIe-pairs node loses 480 GPU-s, ending the one on the NVSwitch
    board 960 GPU-s, within the near tolerance of the least (900 GPU-s): both are among the cheapest, and the
    board's bus bandwidth wins (the pairs node comes first, and loses less, so a work-only choice fails)."""
    snap, gangs = running(
        snapshot(node("pairs", "h100-nvl-pairs"), node("board")),
        gang("on-pairs").on("pairs", *range(8)).started(NOW.now - 60),
        gang("on-board").on("board", *range(8)).started(NOW.now - 120),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["on-board"] and plan.cost.work_lost_gpu_s == 960
    on_pairs = _plan(plan_preemption(snap, preemptor(1, 8), gangs, PreemptionRules(now=NOW.now, near_gpu_s=0)))
    assert _names(on_pairs) == ["on-pairs"]
    assert plan.placement.busbw_gbps > 10 * on_pairs.placement.busbw_gbps


def test_bandwidth_does_not_buy_much_more_work() -> None:
    """The same two nodes, the board's gang an hour older than the other: 8 GPU-hours against 8 GPU-minutes is far
    outside the tolerance, so the cheaper pairs node is cleared, as the cost order says."""
    snap, gangs = running(
        snapshot(node("pairs", "h100-nvl-pairs"), node("board")),
        gang("on-pairs").on("pairs", *range(8)).started(NOW.now - 60),
        gang("on-board").on("board", *range(8)).started(NOW.now - 3_600),
    )
    plan = _plan(plan_preemption(snap, preemptor(1, 8), gangs, NOW))
    assert _names(plan) == ["on-pairs"] and plan.cost.work_lost_gpu_s == 480


def test_in_an_nvlink_rack_one_wide_gang_before_four_narrow_ones() -> None:
    """A full rack: one four-tray gang 100 s old (1,600 GPU-s) and fourteen one-tray gangs 200 s old (800 each). A
    four-tray preemptor needs six trays freed (the rack's trays in use count against its cap of 16). Per tray
    the wide gang looks dearest (its whole work charged to each of its trays), so a node-by-node choice ends six
    narrow gangs (4,800 GPU-s); gang by gang, the wide one frees four trays and two narrow ones the rest (3,200)."""
    base = rack_snapshot(*racks(1))
    wide = gang("wide").on_each([f"r0-t{t:02d}" for t in range(4)], 0, 1, 2, 3).started(NOW.now - 100)
    narrow = [gang(f"narrow-{t:02d}").on(f"r0-t{t:02d}", 0, 1, 2, 3).started(NOW.now - 200) for t in range(4, 18)]
    snap, gangs = running(base, wide, *narrow)
    plan = _plan(plan_preemption(snap, preemptor(4, 4), gangs, NOW))
    assert _names(plan) == ["narrow-04", "narrow-05", "wide"] and plan.cost.work_lost_gpu_s == 3_200
