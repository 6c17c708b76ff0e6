"""Foreign gangs in the control pass, on plain data: planned whole from the first pod, the plan held for ranks not
created yet, the pods steered into it, a plan let go when ranks never come, faults evicting by disruption mode,
bare pods reported, refused and unplaceable gangs, other schedulers' gates respected."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from control_builders import at, cluster
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_builders import CONFIG, member_body, planner

from gputopo.api.nodetopology import LinkState
from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions
from gputopo.control.gangpass import GangInput
from gputopo.control.gangrecords import GangRecord, record_facts
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.claims import Owners
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member, OwnerRef
from gputopo.gangs.read import read_gangs
from gputopo.gangs.unbound import UNSCHEDULABLE, Refusal
from gputopo.placement import place

OWNER = OwnerRef("batch/v1", "Job", "train", "job-uid")
GANG = GangId("team", "job", "train")
KEY = JobKey(GANG.key)


def member(rank: int, gpus: int = 8, gates: Sequence[str] = (GATE,), node: str | None = None, **kw: Any) -> Member:
    return Member(f"train-{rank}-x{rank}", f"uid-{rank}", rank, gpus, tuple(gates), node, created=at(0), **kw)


def gang(*members: Member, size: int = 2, gpus: int = 8, **kw: Any) -> Gang:
    shape = kw.pop("shape", (gpus,) * size)
    return Gang(GANG, Declared(size, shape), tuple(members), owner=kw.pop("owner", OWNER), **kw)


def run(
    gangs: Sequence[Gang],
    view: ClusterView,
    records: Mapping[JobKey, GangRecord] = {},
    now: float = 10.0,
    timeout: float = 300.0,
) -> PassResult:
    bodies = {m.uid: member_body(m) for g in gangs for m in g.members}
    given = GangInput({JobKey(g.id.key): g for g in gangs}, records, bodies, planner, timeout)
    return run_pass(PassInput({}, {}, view, at(now), gangs=given), PassRules(CONFIG, place))


def actions(result: PassResult, key: JobKey = KEY) -> GangActions:
    return next(a for a in result.gang_actions if a.key == key)


def recorded(result: PassResult, key: JobKey = KEY, uid: str = "rec-uid") -> GangRecord:
    """The record as the watch would read it back after the pass's writes."""
    a = actions(result, key)
    assert a.status is not None
    meta = {"name": a.record_name, "namespace": key[0], "uid": uid}
    source, name = key[1].split("/", 1)
    found = record_facts({"metadata": meta, "spec": {"source": source, "gang": name}, "status": a.status})
    assert found is not None
    return found


def two_nodes() -> ClusterView:
    return cluster().node("n0").node("n1", leaf="leaf-a").view()


def test_planned_whole_when_the_first_pod_arrives_and_only_it_is_steered() -> None:
    result = run([gang(member(0))], two_nodes())
    a = actions(result)
    assert a.record is not None and a.record["spec"] == {
        "source": "job",
        "gang": "train",
        "size": 2,
        "owner": {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"},
    }
    assert a.record["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    record = recorded(result)
    assert record.phase == "Planned" and record.generation == 1
    assert sorted(p.node for p in record.ranks) == ["n0", "n1"]
    assert all(len(p.gpus) == 8 for p in record.ranks)
    assert [p.name for p in a.patches] == ["train-0-x0"]
    assert record.missing == (1,)
    assert [len(p.workers) for p in result.gang_plans] == [2]


def test_a_later_member_is_steered_into_the_held_plan_without_planning_again() -> None:
    first = run([gang(member(0))], two_nodes())
    record = recorded(first)
    rank1 = record.plan[1]
    result = run([gang(member(0, gates=(), node=record.plan[0].node), member(1))], two_nodes(), {KEY: record})
    a = actions(result)
    assert [p.name for p in a.patches] == ["train-1-x1"]
    ops = a.patches[0].ops
    assert any(rank1.node in str(op.get("value")) for op in ops)
    assert not result.gang_plans and result.queue_length == 0


def test_the_held_plan_keeps_its_gpus_from_other_gangs_until_its_ranks_arrive() -> None:
    record = recorded(run([gang(member(0))], two_nodes()))
    other_id = GangId("team", "job", "other")
    other = Gang(other_id, Declared(1, (8,)), (replace(member(0), pod="other-0", uid="o0"),), owner=OWNER)
    result = run([gang(member(0)), other], two_nodes(), {KEY: record})
    b = actions(result, JobKey(other_id.key))
    assert b.status is not None and b.status["phase"] == "Unplaceable"
    assert any(e.reason == "GangUnplaceable" for _, e in b.events)


def test_a_plan_whose_ranks_never_arrive_is_let_go_naming_them() -> None:
    record = recorded(run([gang(member(0))], two_nodes(), now=10))
    result = run([gang(member(0, gates=(), node="n0"))], two_nodes(), {KEY: record}, now=10 + 301)
    released = recorded(result)
    assert released.phase == "Released" and released.ranks == () and released.missing == (1,)
    assert "ranks 1 did not arrive" in released.message
    assert any(e.reason == "GangIncomplete" for _, e in actions(result).events)
    # the same pods a pass later: not planned again, until another arrives
    again = run([gang(member(0, gates=(), node="n0"))], two_nodes(), {KEY: released}, now=10 + 302)
    assert not again.gang_plans


@pytest.mark.parametrize(
    ("phase", "restarting"),
    [("Succeeded", False), ("Failed", True)],
    ids=["its-job-is-done", "its-evicted-pods-ended-before-their-owner-made-them-again"],
)
def test_a_gang_whose_pods_all_ended_is_released_without_a_warning(phase: str, restarting: bool) -> None:
    record = recorded(run([gang(member(0), member(1))], two_nodes()))
    if restarting:
        record = replace(record, phase="Restarting", ranks=(), restarts=1)
    ended = [member(r, gates=(), node="n0", phase=phase, deleting=restarting) for r in (0, 1)]
    result = run([gang(*ended)], two_nodes(), {KEY: record})
    released = recorded(result)
    assert released.phase == "Released" and released.message == "every pod of the gang has ended"
    assert released.restarts == record.restarts
    assert not any(e.reason == "GangIncomplete" for _, e in actions(result).events)


def test_before_the_timeout_the_pass_asks_to_look_again_when_it_is_due() -> None:
    record = recorded(run([gang(member(0))], two_nodes(), now=10))
    result = run([gang(member(0, gates=(), node="n0"))], two_nodes(), {KEY: record}, now=20)
    assert result.wake_at == at(10 + 300)


def _running(disruption: str = "all", owner: OwnerRef | None = OWNER, **kw: Any) -> tuple[Gang, GangRecord]:
    record = recorded(run([gang(member(0))], two_nodes()))
    members = [member(r, gates=(), node=record.plan[r].node, phase="Running") for r in (0, 1)]
    return gang(*members, disruption=disruption, owner=owner, **kw), record


def test_a_link_fault_evicts_every_pod_of_an_all_disruption_gang() -> None:
    g, record = _running("all")
    node = record.plan[0].node
    view = cluster().node("n0").node("n1").link(node, 0, 1, LinkState.DOWN).view()
    result = run([g], view, {KEY: record})
    a = actions(result)
    assert sorted(e.name for e in a.evictions) == ["train-0-x0", "train-1-x1"]
    after = recorded(result)
    assert after.phase == "Restarting" and after.restarts == 1 and after.ranks == ()
    assert after.last_restart_reason == "LinkDown"
    assert result.avoid[KEY] == frozenset({node})
    assert result.restarts == ["LinkDown"]
    assert any(e.reason == "GangRestarting" for _, e in a.events)


def test_a_single_disruption_gang_loses_only_the_pod_on_the_fault() -> None:
    g, record = _running("single")
    node = record.plan[1].node
    view = cluster().node("n0").node("n1").link(node, 0, 1, LinkState.DOWN).view()
    after_fault = run([g], view, {KEY: record})
    assert [e.name for e in actions(after_fault).evictions] == ["train-1-x1"]
    kept = recorded(after_fault)
    assert [p.rank for p in kept.ranks] == [0]
    # its owner makes rank 1 again, gated: only rank 1 is planned, off the fault
    replacement = replace(member(1), pod="train-1-y", uid="uid-1b")
    g2 = replace(g, members=(g.members[0], replacement))
    view3 = cluster().node("n0").node("n1").node("n2").link(node, 0, 1, LinkState.DOWN).view()
    replanned = run([g2], view3, {KEY: kept})
    plan = recorded(replanned).plan
    assert plan[0] == kept.plan[0] and plan[1].node not in (node,)
    assert [p.name for p in actions(replanned).patches] == ["train-1-y"]


def test_bare_pods_are_reported_not_evicted_unless_the_gang_says_so() -> None:
    g, record = _running(owner=None)
    view = cluster().node("n0").node("n1").link(record.plan[0].node, 0, 1, LinkState.DOWN).view()
    reported = run([g], view, {KEY: record})
    assert not actions(reported).evictions
    assert "gputopo.io/evict-bare-pods" in recorded(reported).message
    assert any(e.reason == "GangFaultNotEvicted" for _, e in actions(reported).events)
    evicted = run([replace(g, evict_bare=True)], view, {KEY: record})
    assert len(actions(evicted).evictions) == 2


def test_a_refused_gang_is_not_planned_and_its_reason_names_the_annotation() -> None:
    why = 'annotation gputopo.io/min-bus-bandwidth: "fast" is not a number of GB/s'
    result = run([gang(member(0), problems=(why,))], two_nodes())
    a = actions(result)
    assert a.status is not None and a.status["phase"] == "Refused" and why in a.status["message"]
    assert not a.patches and not result.gang_plans
    assert any(e.reason == "GangRefused" for _, e in a.events)


def test_pods_held_by_another_schedulers_gate_are_left_alone() -> None:
    result = run([gang(member(0, gates=("kueue.x-k8s.io/admission", GATE)))], two_nodes())
    a = actions(result)
    assert not a.patches and not result.gang_plans
    assert a.status is not None and "kueue.x-k8s.io/admission" in a.status["message"]


def test_a_gang_kueue_places_by_topology_has_only_gputopos_gate_lifted_and_nothing_planned() -> None:
    tas = dict(gates=("kueue.x-k8s.io/topology", GATE), kueue_workload="job-train-1a2b", placed_by_kueue=True)
    result = run([gang(member(0, **tas), member(1, **tas), problems=("no tier kueue-rack here",))], two_nodes())
    a = actions(result)
    assert not result.gang_plans and result.queue_length == 0
    assert sorted(p.name for p in a.patches) == ["train-0-x0", "train-1-x1"]
    for patch in a.patches:
        removed = [op for op in patch.ops if op["op"] == "remove"]
        assert [op["path"] for op in removed] == ["/spec/schedulingGates/1"]  # gputopo's, not Kueue's
        assert not any("affinity" in op["path"] or "gputopo.io~1gpus" in op["path"] for op in patch.ops)
    record = recorded(result)
    assert record.phase == "PlacedByKueue" and record.ranks == ()
    assert "Topology-Aware Scheduling" in record.message and "job-train-1a2b" in record.message
    assert any(e.reason == "GangPlacedByKueue" for _, e in a.events)
    # Kueue lifts its gate and binds: the next pass still plans nothing and holds no GPUs.
    bound = dict(kueue_workload="job-train-1a2b", placed_by_kueue=True, gates=())
    again = run([gang(member(0, node="n0", **bound), member(1, node="n1", **bound))], two_nodes(), {KEY: record})
    assert not again.gang_plans and not any(a.patches for a in again.gang_actions)


def test_a_kueue_workloads_plan_is_let_go_as_soon_as_kueue_stops_it() -> None:
    admitted = dict(kueue_workload="job-train-1a2b")
    record = recorded(run([gang(member(0, **admitted), member(1, **admitted))], two_nodes()))
    assert record.phase == "Planned" and len(record.ranks) == 2
    # Kueue evicted the workload: its Job is suspended and the Job controller deletes both pods (one still
    # terminating on its node; one never bound, which the pod garbage collector marks Failed).
    going = [
        member(0, node="n0", gates=(), deleting=True, phase="Running", **admitted),
        member(1, gates=(), deleting=True, phase="Failed", **admitted),
    ]
    result = run([gang(*going)], two_nodes(), {KEY: record})
    released = recorded(result)
    assert released.phase == "Released" and released.ranks == ()
    assert "Kueue evicted or deactivated it" in released.message
    assert not any(e.reason == "GangIncomplete" for _, e in actions(result).events)
    # Admitted again: the new pods are planned afresh.
    back = run([gang(member(0, **admitted), member(1, **admitted))], two_nodes(), {KEY: released})
    again = recorded(back)
    assert again.phase == "Planned" and again.generation == record.generation + 1 and len(again.ranks) == 2


def test_a_kueue_workloads_unbound_pods_failed_as_they_are_deleted_let_the_plan_go_at_once() -> None:
    admitted = dict(kueue_workload="job-train-1a2b")
    record = recorded(run([gang(member(0, **admitted), member(1, **admitted))], two_nodes()))
    going = [member(r, gates=(), deleting=True, phase="Failed", **admitted) for r in (0, 1)]
    released = recorded(run([gang(*going)], two_nodes(), {KEY: record}))
    assert released.phase == "Released" and released.ranks == () and "Kueue" in released.message


def test_a_kueue_workloads_rank_that_ended_before_the_next_arrives_keeps_the_plan_for_it() -> None:
    admitted = dict(kueue_workload="jobset-train-1a2b")
    record = recorded(run([gang(member(0, **admitted))], two_nodes()))
    done = member(0, gates=(), node=record.plan[0].node, phase="Succeeded", **admitted)
    held = run([gang(done)], two_nodes(), {KEY: record}, now=20)
    assert not held.gang_actions and held.visible == {KEY: record.generation}


def test_a_gang_not_of_kueue_keeps_its_plan_while_its_pods_are_made_again() -> None:
    record = recorded(run([gang(member(0), member(1))], two_nodes()))
    going = [member(r, node=f"n{r}", gates=(), deleting=True) for r in (0, 1)]
    kept = recorded(run([gang(*going)], two_nodes(), {KEY: record}))
    assert kept.ranks == record.ranks


def test_a_zero_gpu_launcher_is_let_go_unpinned_and_only_workers_are_planned() -> None:
    launcher = member(0, gpus=0)
    result = run([gang(launcher, member(1), size=3, shape=(0, 8, 8))], two_nodes())
    record = recorded(result)
    assert sorted(record.plan) == [1, 2]
    names = [p.name for p in actions(result).patches]
    assert sorted(names) == ["train-0-x0", "train-1-x1"]
    launcher_ops = next(p.ops for p in actions(result).patches if p.name == "train-0-x0")
    assert not any("affinity" in str(op.get("path")) for op in launcher_ops)


def test_a_gang_larger_than_the_cluster_is_unplaceable_with_the_reason() -> None:
    result = run([gang(member(0), size=3)], two_nodes())
    a = actions(result)
    assert a.status is not None and a.status["phase"] == "Unplaceable" and a.status["message"]
    assert not a.patches


def test_a_record_whose_pods_are_all_gone_lets_its_plan_go() -> None:
    record = recorded(run([gang(member(0))], two_nodes()))
    result = run([], two_nodes(), {KEY: record})
    a = actions(result)
    assert a.status is not None and a.status["ranks"] == [] and a.status["phase"] == "Released"


_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8)
_garbage = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
_LABELS = ["gputopo.io/gang", "gputopo.io/gang-size", "gputopo.io/rank", "batch.kubernetes.io/job-completion-index",
           "jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name", "kueue.x-k8s.io/pod-group-name",
           "training.kubeflow.org/job-name"]  # fmt: skip
_ANNOTATIONS = ["gputopo.io/gpus-per-rank", "gputopo.io/min-bus-bandwidth", "gputopo.io/required-tier",
                "gputopo.io/intra-node", "gputopo.io/gpus", "gputopo.io/gang-id",
                "kueue.x-k8s.io/pod-group-total-count", "leaderworkerset.sigs.k8s.io/size"]  # fmt: skip
_SPEC = ["schedulingGates", "containers", "affinity", "nodeSelector", "tolerations", "nodeName", "schedulingGroup"]


def _raw(name: str, labels: dict[str, Any], annotations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "labels": labels,
                     "annotations": annotations, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"schedulingGates": [{"name": GATE}],
                 "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}], **spec},
    }  # fmt: skip
    return body


@settings(max_examples=200, deadline=None)
@given(
    where=st.sampled_from(
        [("label", k) for k in _LABELS] + [("annotation", k) for k in _ANNOTATIONS] + [("spec", k) for k in _SPEC]
    ),
    value=_garbage,
)
def test_generated_garbage_on_gang_pods_never_stops_the_pass(where: tuple[str, str], value: Any) -> None:
    """Garbage in one gang's pods is that gang's problem: the pass goes on, and a good gang beside it is placed."""
    kind, key = where
    contract = {"gputopo.io/gang": "bad", "gputopo.io/gang-size": "2", "gputopo.io/rank": "0"}
    labels: dict[str, Any] = {**contract, key: value} if kind == "label" else contract
    annotations: dict[str, Any] = {key: value} if kind == "annotation" else {}
    spec = {key: value} if kind == "spec" else {}
    bad = _raw("bad-0", labels, annotations, **spec)
    good = [_raw(f"good-{r}", {"gputopo.io/gang": "good", "gputopo.io/gang-size": "2", "gputopo.io/rank": str(r)}, {})
            for r in (0, 1)]  # fmt: skip
    found = read_gangs([bad, *good], Owners())
    given_ = GangInput(
        {JobKey(g.id.key): g for g in found.gangs}, {}, {p["metadata"]["uid"]: p for p in (bad, *good)}, planner
    )
    room = cluster().node("n0").node("n1").node("n2").node("n3").view()  # for both, if the bad one still reads
    result = run_pass(PassInput({}, {}, room, at(10), gangs=given_), PassRules(CONFIG, place))
    good_key = JobKey(("team", "gputopo/good"))
    placed = next(a for a in result.gang_actions if a.key == good_key)
    assert sorted(p.name for p in placed.patches) == ["good-0", "good-1"]


def test_a_steered_pod_that_stays_unschedulable_is_evicted_and_its_rank_planned_again() -> None:
    record = recorded(run([gang(member(0))], two_nodes()))
    node0 = record.plan[0].node
    stuck = member(0, gates=(), refusal=Refusal(UNSCHEDULABLE, "0/2 nodes are available", at(20)))
    g = gang(stuck, member(1, gates=(), node=record.plan[1].node, phase="Running"))
    waiting = run([g], two_nodes(), {KEY: record}, now=40)  # CONFIG: 60 s
    assert not actions(waiting).evictions and waiting.wake_at == at(80)
    result = run([g], two_nodes(), {KEY: record}, now=81)
    a = actions(result)
    assert [e.name for e in a.evictions] == ["train-0-x0"]
    after = recorded(result)
    assert [p.rank for p in after.ranks] == [1] and after.phase == "Planned"
    assert result.avoid[KEY] == frozenset({node0})
    assert any(e.reason == "PlacementTimedOut" for _, e in a.events)


def test_a_rank_that_ends_before_the_next_arrives_keeps_the_plan_for_it() -> None:
    """A JobSet's first Job may finish before its second is made: the second rank's GPUs stay planned for it."""
    record = recorded(run([gang(member(0))], two_nodes()))
    done = member(0, gates=(), node=record.plan[0].node, phase="Succeeded")
    held = run([gang(done)], two_nodes(), {KEY: record}, now=20)
    assert not held.gang_actions and not held.gang_plans  # the record stays as it is: Planned, waiting for rank 1
    assert record.phase == "Planned" and record.message == "waiting for ranks 1 to be created"
    assert held.visible == {KEY: record.generation}
    later = run([gang(done, member(1))], two_nodes(), {KEY: record}, now=30)
    assert [p.name for p in actions(later).patches] == ["train-1-x1"]
    assert not later.gang_plans  # steered into the plan it had, not planned again


def test_a_gang_the_pass_did_not_reach_writes_nothing_and_the_next_pass_plans_it() -> None:
    other = GangId("team", "job", "waits")
    first, second = gang(member(0), member(1)), replace(gang(member(0), member(1)), id=other)
    bodies = {m.uid: member_body(m) for m in first.members}
    given = GangInput({KEY: first, JobKey(other.key): second}, {}, bodies, planner)
    one = Limits(placements=1)
    result = run_pass(PassInput({}, {}, two_nodes(), at(10), gangs=given), PassRules(CONFIG, place, one))
    assert [a.key for a in result.gang_actions] == [KEY]  # no record, no status for the gang left for later
    assert result.queue_length == 1 and result.wake_at == at(10)  # which the next pass, at once, plans
    given = GangInput({KEY: first, JobKey(other.key): second}, {KEY: recorded(result)}, bodies, planner)
    after = run_pass(
        PassInput(
            {}, {}, cluster().node("n0").node("n1").node("n2").node("n3").view(), at(10), busy={KEY}, gangs=given
        ),
        PassRules(CONFIG, place, one),
    )
    assert [a.key for a in after.gang_actions] == [JobKey(other.key)]
    assert actions(after, JobKey(other.key)).record is not None


def test_the_plans_record_already_says_what_it_waits_for_so_the_next_step_writes_no_status() -> None:
    whole = run([gang(member(0), member(1))], two_nodes())
    record = recorded(whole)
    assert record.message == "waiting for kube-scheduler to bind" and record.missing == ()
    steered = [member(r, gates=(), node=record.plan[r].node if r == 0 else None) for r in range(2)]
    unbound = run([gang(*steered)], two_nodes(), {KEY: record})
    assert not unbound.gang_actions  # rank 1 not bound yet: nothing new to record
    bound = [member(r, gates=(), node=record.plan[r].node) for r in range(2)]
    running = recorded(run([gang(*bound)], two_nodes(), {KEY: record}))
    assert running.phase == "Running"

    part = recorded(run([gang(member(0))], two_nodes()))
    assert part.message == "waiting for ranks 1 to be created" and part.missing == (1,)
