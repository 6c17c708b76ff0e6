"""A gang of exclusive parts preempts in the control pass: its nomination holds every part's GPUs, one domain of its
label each, and once its victims are gone it is placed on them part by part."""

from __future__ import annotations

from dataclasses import replace

from test_gang_pass import KEY, OWNER, member
from test_gang_pass import gang as foreign_gang
from test_preemption_pass import _gang_input, _low_on_two_nodes, _plan_gang, step, through_the_nomination

from gputopo.control.facts import JobKey
from gputopo.control.preemptions import Holder, PreemptionSettings, Wanting, decide
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang, Needs
from gputopo.gangs.planning import preemptor_shapes
from gputopo.placement import DEFAULT_TIERS, NodeInfo, Snapshot
from gputopo.placement.preemption import PreemptionPolicy, RunningGang, held_placement
from gputopo.topology.catalog import load_node_type

POOL = "example.com/pool"


def _pools(v: ClusterView, **pools: str) -> ClusterView:
    """The view with each named node in a pool."""
    nodes = {**v.nodes}
    for name, pool in pools.items():
        nodes[name] = replace(nodes[name], labels={**nodes[name].labels, POOL: pool})
    return replace(v, nodes=nodes)


def _exclusive(*parts: str) -> Gang:
    """A pending gang of one 8-GPU rank per part, each part in a domain of ``POOL`` of its own."""
    members = [member(r) for r in range(len(parts))]
    gang = foreign_gang(*members, size=len(parts), priority=1000, owner=OWNER, needs=Needs(exclusive_label=POOL))
    assert gang.declared is not None
    return replace(gang, declared=replace(gang.declared, parts=parts))


def test_the_preemptors_shapes_name_its_parts_and_label() -> None:
    shapes = preemptor_shapes(_exclusive("train-0", "train-1"), DEFAULT_TIERS)
    assert shapes is not None
    assert [(s.ranks, s.part, s.exclusive) for s in shapes] == [((0,), "train-0", POOL), ((1,), "train-1", POOL)]


def test_an_exclusive_gang_nominates_one_pool_per_part_ends_its_victim_once_and_is_placed_there() -> None:
    """The research job runs on n0 (pool a) and n1 (pool b). The two parts each need a pool of their own: the job
    is the one victim, the nomination holds both nodes (it is checked by the gang's planner while the victim ends),
    and once it is gone each part is planned in its own pool."""
    low, pods, v = _low_on_two_nodes()
    v = _pools(v, n0="a", n1="b")
    pending = _exclusive("train-0", "train-1")
    first, after = through_the_nomination(low, pods, v, pending)
    assert first.nomination is not None and first.nomination.domain == f"{POOL}=a, {POOL}=b"
    nominated = {(e.node, g) for e in first.nomination.gpus for g in e.gpus}
    assert {n for n, _ in nominated} == {"n0", "n1"} and len(nominated) == 16
    assert sorted(p.node for p in after.ranks) == ["n0", "n1"]
    assert {(p.node, g) for p in after.ranks for g in p.gpus} == nominated


def test_without_a_pool_for_each_part_it_preempts_nobody() -> None:
    """Both nodes in one pool: the second part has no pool left, so nothing is nominated and nobody ends."""
    low, pods, v = _low_on_two_nodes()
    v = _pools(v, n0="a", n1="a")
    result = step([low], pods, v, gangs=_gang_input(_exclusive("train-0", "train-1"), None, _plan_gang))
    assert result.nominated == {}
    assert result.preempted == []


def test_decide_gives_the_union_of_the_parts_victims_within_the_pass_budget() -> None:
    """Two pools of two nodes, each node running a research gang: the two parts end the newer gang of each pool.
    With a budget of one victim the second part finds none, and the gang preempts nobody."""
    base = Snapshot(NodeInfo(n, load_node_type("hgx-h100"), {POOL: n[0]}) for n in ("a0", "a1", "b0", "b1"))

    def low(n: str, started: float) -> Holder:
        gang = RunningGang(f"default/low-{n}", 100, held_placement(base, [(n, range(8))]), start_time=started)
        return Holder(JobKey(("default", f"low-{n}")), gang)

    holders = [low("a0", 0.0), low("a1", 500.0), low("b0", 500.0), low("b1", 0.0)]
    taken = base
    for h in holders:
        taken = taken.reserve(h.running.placement)
    shapes = preemptor_shapes(_exclusive("train-0", "train-1"), DEFAULT_TIERS)
    assert shapes is not None
    want = Wanting(KEY, shapes[0].request, 1000, PreemptionPolicy.PREEMPT_LOWER_PRIORITY, shapes=shapes)
    decisions, refused = decide(taken, [want], holders, {}, PreemptionSettings(), 1000.0)
    assert refused == {}
    (decision,) = decisions
    assert sorted(decision.victims) == [("default", "low-a1"), ("default", "low-b0")]
    assert sorted(decision.plan.nomination.gpus) == ["a1", "b0"]
    tight = PreemptionSettings(max_victims_per_pass=1, max_victims_per_gang=1)
    decisions, refused = decide(taken, [want], holders, {}, tight, 1000.0)
    assert decisions == [] and refused[KEY].reason.startswith("part train-1: ")
