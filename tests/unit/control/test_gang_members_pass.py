"""A gang's status where its pods do not all take GPUs, and where its sources disagree: a rank without GPUs is not
waited for (a JobSet's CPU launcher is never gated, so never seen), a launcher read as a bystander is never
evicted, and a disagreement is said in the status and once as an Event."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from control_builders import at, cluster
from pass_builders import CONFIG, member_body, planner

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions
from gputopo.control.gangpass import GangInput
from gputopo.control.gangrecords import GangRecord, record_facts
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member, OwnerRef
from gputopo.placement import place

OWNER = OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "mpi", "js-uid")
GANG = GangId("team", "jobset", "mpi")
KEY = JobKey(GANG.key)


def member(rank: int, gpus: int = 8, gates: Sequence[str] = (GATE,), node: str | None = None, **kw: Any) -> Member:
    return Member(f"mpi-{rank}", f"uid-{rank}", rank, gpus, tuple(gates), node, created=at(0), **kw)


def gang(*members: Member, **kw: Any) -> Gang:
    return Gang(GANG, Declared(3, (0, 8, 8)), tuple(members), owner=OWNER, **kw)


def run(gangs: Sequence[Gang], records: Mapping[JobKey, GangRecord] = {}, now: float = 10.0) -> PassResult:
    view: ClusterView = cluster().node("n0").node("n1", leaf="leaf-a").view()
    bodies = {m.uid: member_body(m) for g in gangs for m in g.members}
    given = GangInput({JobKey(g.id.key): g for g in gangs}, records, bodies, planner, 300.0)
    return run_pass(PassInput({}, {}, view, at(now), gangs=given), PassRules(CONFIG, place))


def actions(result: PassResult) -> GangActions:
    return next(a for a in result.gang_actions if a.key == KEY)


def recorded(result: PassResult) -> GangRecord:
    a = actions(result)
    assert a.status is not None
    meta = {"name": a.record_name, "namespace": "team", "uid": "rec-uid"}
    found = record_facts({"metadata": meta, "spec": {"source": "jobset", "gang": "mpi"}, "status": a.status})
    assert found is not None
    return found


def _bound(record: GangRecord, *extra: Member, **kw: Any) -> Gang:
    workers = [member(r, gates=(), node=record.plan[r].node, phase="Running") for r in (1, 2)]
    return gang(*workers, *extra, **kw)


def test_a_jobset_whose_cpu_launcher_is_never_gated_runs_once_its_gpu_ranks_are_bound() -> None:
    planned = recorded(run([gang(member(1), member(2))]))
    assert planned.missing == () and sorted(p.rank for p in planned.ranks) == [1, 2]
    running = recorded(run([_bound(planned)], {KEY: planned}))
    assert running.phase == "Running" and running.missing == ()
    later = run([_bound(planned)], {KEY: running}, now=10 + 3600)  # past the arrival timeout: still running
    assert all(a.status is None or a.status["phase"] == "Running" for a in later.gang_actions)
    assert not any(e.reason == "GangIncomplete" for a in later.gang_actions for _, e in a.events)


def test_a_bystander_launcher_is_not_evicted_when_its_gang_restarts() -> None:
    planned = recorded(run([gang(member(1), member(2))]))
    launcher = member(0, gpus=0, gates=(), node="n9", phase="Running", bystander=True)
    restarting = replace(planned, phase="Restarting", ranks=(), restarts=1)
    result = run([gang(launcher, member(1), member(2))], {KEY: restarting})
    assert all(e.pod != "mpi-0" for e in actions(result).evictions)
    assert result.gang_plans  # planned again, not waiting on the launcher's eviction


def test_a_disagreement_is_in_the_status_and_told_once() -> None:
    said = "pod mpi-1 of TrainJob mpi (JobSet mpi): PET_NNODES is '4', its replicated job node runs 2 pods"
    first = run([gang(member(1), member(2), disagreements=(said,))])
    planned = recorded(first)
    assert planned.message.endswith(f"sources disagree: {said}")
    assert [e.reason for _, e in actions(first).events].count("GangSourcesDisagree") == 1
    second = run([_bound(planned, disagreements=(said,))], {KEY: planned})
    running = recorded(second)
    assert running.phase == "Running" and running.message == f"sources disagree: {said}"
    reasons = [e.reason for _, e in actions(second).events]
    assert "GangSourcesDisagree" not in reasons
    running_event = next(e for _, e in actions(second).events if e.reason == "GangRunning")
    assert "disagree" not in running_event.message
