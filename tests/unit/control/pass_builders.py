"""A control pass on plain data, run the way the operator runs it, and the statuses and pods a placed gang has:
shared by the tests of the pass and of what it decides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from control_builders import T0, at, pod

from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus, WorkerPlacement
from gputopo.control.actions import JobActions
from gputopo.control.dra import GpuAllocation
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.model import Gang, Member
from gputopo.placement import DEFAULT_TIERS, place
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable, WorkerAssignment

__all__ = ["CONFIG", "DRA", "TRUSTED", "actions_of", "gang", "member_body", "placed", "planner", "run", "running"]

# The victims one operator chose per preemptor, kept from pass to pass as the runtime keeps them (a test's passes are
# one operator's unless it restarts it); cleared before each test (conftest).
TRUSTED: dict[JobKey, frozenset[str]] = {}

CONFIG = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30)
DRA = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30, gpu_allocation=GpuAllocation.DRA)


def run(
    jobs: Sequence[JobFacts],
    view: ClusterView,
    pods: Sequence[PodFacts] = (),
    now: float = 10.0,
    ledger: Sequence[PlannedGang] = (),
    config: Config = CONFIG,
) -> PassResult:
    by_job: dict[JobKey, list[PodFacts]] = {}
    for p in pods:
        by_job.setdefault((p.namespace, str(p.job)), []).append(p)
    return run_pass(PassInput({j.key: j for j in jobs}, by_job, view, at(now), ledger), PassRules(config, place))


def actions_of(result: PassResult, name: str) -> JobActions:
    return next(a for a in result.actions if a.job[1] == name)


def placed(workers: list[tuple[str, list[int]]], generation: int = 1, nics: list[str] | None = None) -> PlacementStatus:
    return PlacementStatus(
        generation=generation,
        estimatedBusBandwidthGBps=400.0,
        bottleneck="test",
        workers=[WorkerPlacement(rank=i, node=n, gpus=g, nics=nics or []) for i, (n, g) in enumerate(workers)],
    )


def running(placement: PlacementStatus, **extra: object) -> TrainingJobStatus:
    return TrainingJobStatus(phase=JobPhase.RUNNING, placement=placement, start_time=T0, observed_generation=1, **extra)


def gang(j: JobFacts, placement: PlacementStatus, phase: str = "Running") -> list[PodFacts]:
    return [
        pod(j, w.rank, node=w.node, gpus=tuple(w.gpus), generation=placement.generation, phase=phase)
        for w in placement.workers
    ]


def planner(snapshot: Snapshot, gang: Gang) -> Placement | Unplaceable:
    """The engine on the gang's GPU ranks (one shape), its workers renumbered to the gang's ranks."""
    assert gang.declared is not None
    ranks = gang.declared.gpu_ranks
    result = place(snapshot, Request(workers=len(ranks), gpus_per_worker=gang.declared.shape[ranks[0]]))
    if isinstance(result, Unplaceable):
        return result
    workers = tuple(WorkerAssignment(ranks[w.rank], w.node, w.gpus, w.nics) for w in result.workers)
    return replace(result, workers=workers)


def member_body(m: Member) -> dict[str, Any]:
    """The pod body of a foreign gang's member: its name, uid, gates and GPU limit (the gang tests' pods)."""
    return {
        "metadata": {"name": m.pod, "namespace": "team", "uid": m.uid},
        "spec": {
            "schedulingGates": [{"name": g} for g in m.gates],
            "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(m.gpus)}}}],
        },
    }
