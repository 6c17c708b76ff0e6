"""plan_gang places every GPU rank a foreign gang declares: one shape in one request, several shapes unit by
unit on one snapshot, exclusive parts each in a domain of their own, tiers named by label key."""

from __future__ import annotations

from gang_builders import jobset, jobset_pods, pod
from placement_builders import TIER0, TIER1, node, snapshot
from preemption_builders import gang as gang_of
from preemption_builders import running

from gputopo.gangs.claims import Owners
from gputopo.gangs.model import Declared, Gang, GangId, Member, Needs
from gputopo.gangs.planning import GangPlan, Tiers, plan_gang, preemptor_shapes, resolve, units
from gputopo.gangs.read import read_gangs
from gputopo.placement import place
from gputopo.placement.preemption import PreemptionPlan, PreemptionRules, Preemptor, plan_preemption
from gputopo.placement.preemption.nominations import nominated_only
from gputopo.placement.shapes import place_shapes
from gputopo.placement.types import DEFAULT_TIERS, Unplaceable

NS = "team-a"
POOL = "cloud.google.com/gke-nodepool"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
GANG = GangId(NS, "gputopo", "g")


def _gang(shape: tuple[int, ...], roles: tuple[str, ...] = (), needs: Needs | None = None) -> Gang:
    return Gang(GANG, Declared(len(shape), shape, roles), needs=needs or Needs())


def _planned(result: GangPlan | Unplaceable) -> GangPlan:
    assert isinstance(result, GangPlan), str(result)
    return result


def test_one_shape_is_one_request_with_the_gangs_ranks() -> None:
    js = jobset("llama", ("workers", 2, 2, 8))
    (gang,) = read_gangs(jobset_pods(js)[:1], Owners(jobsets={(NS, "llama"): js})).gangs
    snap = snapshot(*(node(f"n{i}").leaf("leaf-1") for i in range(4)))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert [w.rank for w in plan.workers] == [0, 1, 2, 3]
    assert sorted(w.node for w in plan.workers) == ["n0", "n1", "n2", "n3"]
    assert all(len(w.gpus) == 8 for w in plan.workers)
    assert plan.tier == 0
    assert plan.busbw_gbps > 0


def test_a_launcher_without_gpus_is_not_planned() -> None:
    built = (
        pod("mpi-worker-1")
        .gpus(8)
        .label("gputopo.io/gang", "mpi")
        .label("gputopo.io/gang-size", "3")
        .label("gputopo.io/rank", "1")
        .annotate("gputopo.io/gpus-per-rank", "0,8,8")
        .build()
    )
    (gang,) = read_gangs([built], Owners()).gangs
    snap = snapshot(node("a").leaf("l1"), node("b").leaf("l1"))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert [w.rank for w in plan.workers] == [1, 2]
    assert plan.of_rank(0) is None
    assert {w.node for w in plan.workers} == {"a", "b"}


def test_two_roles_of_8_and_4_gpus_are_placed_role_by_role_without_sharing_gpus() -> None:
    gang = _gang((8, 8, 4, 4), ("trainer", "trainer", "critic", "critic"))
    snap = snapshot(node("a").leaf("l1"), node("b").leaf("l1"), node("c").leaf("l1"))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert [(w.rank, len(w.gpus)) for w in plan.workers] == [(0, 8), (1, 8), (2, 4), (3, 4)]
    taken = [(w.node, g) for w in plan.workers for g in w.gpus]
    assert len(taken) == len(set(taken)) == 24
    assert len(plan.parts) == 2
    assert plan.busbw_gbps == min(p.busbw_gbps for p in plan.parts)


def test_a_second_role_that_does_not_fit_refuses_the_whole_gang_naming_it() -> None:
    gang = _gang((8, 8, 4), ("trainer", "trainer", "critic"))
    result = plan_gang(snapshot(node("a").leaf("l1"), node("b").leaf("l1")), gang, DEFAULT_TIERS, place)
    assert isinstance(result, Unplaceable)
    assert result.reason.startswith("rank 2 (critic, 4 GPUs each): ")


def test_required_tier_keeps_later_roles_in_the_first_roles_domain() -> None:
    gang = _gang((8, 4), ("a", "b"), Needs(required_label=TIER0))
    snap = snapshot(
        node("x1").leaf("leaf-1"),
        node("y1").leaf("leaf-2").used(0, 1, 2, 3),
        node("y2").leaf("leaf-2"),
    )
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    leaf = {"x1": "leaf-1", "y1": "leaf-2", "y2": "leaf-2"}
    assert {leaf[w.node] for w in plan.workers} == {"leaf-2"}  # leaf-1 holds the 8-GPU rank, not the 4-GPU one
    assert plan.tier == 0


def test_exclusive_parts_each_take_a_domain_of_their_own() -> None:
    js = jobset("llama", ("workers", 2, 2, 8), exclusive=POOL)
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    pools = {"a1": "pool-a", "a2": "pool-a", "b1": "pool-b", "b2": "pool-b", "c1": "pool-c"}
    snap = snapshot(*(node(n).leaf("l1").label(POOL, p) for n, p in pools.items()))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    by_rank = {w.rank: pools[w.node] for w in plan.workers}
    assert by_rank[0] == by_rank[1] and by_rank[2] == by_rank[3]
    assert by_rank[0] != by_rank[2]
    assert {by_rank[0], by_rank[2]} == {"pool-a", "pool-b"}  # pool-c has one node: too small for a part


def test_exclusive_parts_refused_when_domains_run_out() -> None:
    js = jobset("llama", ("workers", 3, 2, 8), exclusive=POOL)
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    snap = snapshot(*(node(f"{p}{i}").leaf("l1").label(POOL, p) for p in ("a", "b") for i in range(3)))
    result = plan_gang(snap, gang, DEFAULT_TIERS, place)
    assert isinstance(result, Unplaceable)
    assert result.reason == f"ranks 4-5 (llama-workers-2, 8 GPUs each): no free domain of {POOL}"


def test_tier_by_label_key_and_unknown_keys() -> None:
    assert resolve(Needs(required_label=TIER1, preferred_label=TIER0), DEFAULT_TIERS) == Tiers(1, 0)
    assert resolve(Needs(required_tier=1, required_label=TIER0), DEFAULT_TIERS) == Tiers(0, None)
    problems = resolve(Needs(required_label="topology.kubernetes.io/rack"), DEFAULT_TIERS)
    assert problems == (
        "the required tier names node label topology.kubernetes.io/rack, which is no network tier here "
        f"(tiers: {TIER0}, {TIER1})",
    )
    assert resolve(Needs(preferred_tier=5), DEFAULT_TIERS) == (
        "the preferred tier 5 names a tier this cluster does not have (it has 2 network tiers)",
    )


def test_a_required_label_that_is_no_tier_refuses_the_gang() -> None:
    gang = _gang((8,), needs=Needs(required_label="topology.kubernetes.io/rack"))
    result = plan_gang(snapshot(node("a").leaf("l1")), gang, DEFAULT_TIERS, place)
    assert isinstance(result, Unplaceable) and "topology.kubernetes.io/rack" in result.reason


def test_node_selector_comes_from_a_members_pod_spec() -> None:
    built = (
        pod("p-0")
        .gpus(8)
        .label("gputopo.io/gang", "g")
        .label("gputopo.io/gang-size", "1")
        .spec("nodeSelector", {"pool": "blue"})
        .build()
    )
    (gang,) = read_gangs([built], Owners()).gangs
    snap = snapshot(node("red-1").leaf("l1").label("pool", "red"), node("blue-1").leaf("l1").label("pool", "blue"))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert [w.node for w in plan.workers] == ["blue-1"]


def test_problems_or_unknown_size_refuse_before_placing() -> None:
    snap = snapshot(node("a").leaf("l1"))
    refused = plan_gang(snap, Gang(GANG, Declared(1, (8,)), problems=("bad",)), DEFAULT_TIERS, place)
    assert isinstance(refused, Unplaceable) and refused.reason == "bad"
    waiting = plan_gang(snap, Gang(GANG, None, members=(Member("p", "u", 0, 8),)), DEFAULT_TIERS, place)
    assert isinstance(waiting, Unplaceable) and "not known yet" in waiting.reason


def test_roles_of_one_shape_share_one_request() -> None:
    js = jobset("llama", ("driver", 1, 1, 8), ("workers", 1, 3, 8))
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    assert gang.declared is not None
    (unit,) = units(gang.declared, exclusive=False)
    assert (unit.ranks, unit.gpus, unit.role) == ((0, 1, 2, 3), 8, "driver+workers")
    snap = snapshot(*(node(f"n{i}").leaf("l1") for i in range(4)))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert len(plan.parts) == 1 and [w.rank for w in plan.workers] == [0, 1, 2, 3]


def test_a_gang_without_gpu_ranks_has_an_empty_plan() -> None:
    plan = _planned(plan_gang(snapshot(node("a").leaf("l1")), _gang((0, 0)), DEFAULT_TIERS, place))
    assert plan.workers == () and plan.parts == ()


def test_only_the_exclusive_replicated_jobs_are_parts() -> None:
    js = jobset("llama", ("driver", 1, 1, 4), ("workers", 2, 1, 8))
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {EXCLUSIVE: POOL}}
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    assert gang.needs.exclusive_label == POOL
    assert gang.declared is not None and gang.declared.parts == ("", "llama-workers-0", "llama-workers-1")
    pools = {"a1": "pool-a", "b1": "pool-b", "c1": "pool-c"}
    snap = snapshot(*(node(n).leaf("l1").label(POOL, p) for n, p in pools.items()))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert pools[plan.workers[1].node] != pools[plan.workers[2].node]
    assert len(plan.workers[0].gpus) == 4


def test_the_preemptor_of_several_shapes_is_each_shape_with_the_gangs_ranks() -> None:
    gang = _gang((0, 8, 8, 4), ("launcher", "trainer", "trainer", "critic"), Needs(required_label=TIER0))
    shapes = preemptor_shapes(gang, DEFAULT_TIERS)
    assert shapes is not None
    assert [(s.ranks, s.request.workers, s.request.gpus_per_worker) for s in shapes] == [((1, 2), 2, 8), ((3,), 1, 4)]
    assert all(s.request.required_tier == 0 and s.request.name == str(GANG) for s in shapes)
    # Placed in turn they are the plan plan_gang makes, ranks and estimate alike.
    snap = snapshot(node("a").leaf("l1"), node("b").leaf("l1"), node("c").leaf("l1").used(0, 1))
    plan = _planned(plan_gang(snap, gang, DEFAULT_TIERS, place))
    assert place_shapes(snap, shapes, place) == plan.placement


def test_a_gang_of_exclusive_parts_preempts_by_part() -> None:
    """Each child Job is a part of its own, named with the exclusive label; a replicated job without the annotation
    is ranks outside every part."""
    js = jobset("llama", ("workers", 2, 2, 8), exclusive=POOL)
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    found = preemptor_shapes(gang, DEFAULT_TIERS)
    assert found is not None
    assert [(s.ranks, s.part, s.exclusive) for s in found] == [
        ((0, 1), "llama-workers-0", POOL),
        ((2, 3), "llama-workers-1", POOL),
    ]
    mixed = jobset("llama", ("driver", 1, 1, 4), ("workers", 2, 1, 8))
    mixed["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {EXCLUSIVE: POOL}}
    (gang,) = read_gangs(jobset_pods(mixed), Owners(jobsets={(NS, "llama"): mixed})).gangs
    found = preemptor_shapes(gang, DEFAULT_TIERS)
    assert found is not None
    assert [(s.ranks, s.part, s.exclusive) for s in found] == [
        ((0,), "", ""),
        ((1,), "llama-workers-0", POOL),
        ((2,), "llama-workers-1", POOL),
    ]
    shared = jobset("llama", ("driver", 1, 1, 4), ("workers", 2, 1, 8))
    (gang,) = read_gangs(jobset_pods(shared), Owners(jobsets={(NS, "llama"): shared})).gangs
    found = preemptor_shapes(gang, DEFAULT_TIERS)
    assert found is not None and [(s.ranks, s.request.gpus_per_worker) for s in found] == [((0,), 4), ((1, 2), 8)]


def test_an_exclusive_jobsets_preemption_is_placed_again_by_plan_gang_on_its_nomination() -> None:
    """Three pools of one node, each running a lower-priority gang: the JobSet's two Jobs preempt the two newest,
    one pool each, and ``plan_gang`` places the gang on the nominated GPUs alone, each Job in its own pool."""
    js = jobset("llama", ("workers", 2, 1, 8), exclusive=POOL)
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    shapes = preemptor_shapes(gang, DEFAULT_TIERS)
    assert shapes is not None
    pools = {"a1": "pool-a", "b1": "pool-b", "c1": "pool-c"}
    base = snapshot(*(node(n).leaf("l1").label(POOL, p) for n, p in pools.items()))
    snap, gangs = running(
        base, *(gang_of(f"low-{n}", 0).on(n, *range(8)).started(t) for n, t in zip(pools, (0, 50, 90), strict=True))
    )
    plan = plan_preemption(snap, Preemptor.of_shapes(shapes, 10), gangs, PreemptionRules(now=100.0))
    assert isinstance(plan, PreemptionPlan), str(plan)
    assert [v.name for v in plan.victims] == ["low-b1", "low-c1"]
    again = _planned(plan_gang(nominated_only(snap, plan.nomination), gang, DEFAULT_TIERS, place))
    assert {w.node for w in again.workers} == {"b1", "c1"}
    assert {(w.node, g) for w in again.workers for g in w.gpus} == {
        (n, g) for n, gpus in plan.nomination.gpus.items() for g in gpus
    }
