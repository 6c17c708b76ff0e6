"""`gputopo plan --preempt`: which running gangs to preempt for a job that cannot be placed, and where it goes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from gputopo.cli.errors import CliError
from gputopo.gangs.model import Gang
from gputopo.gangs.planning import preemptor_shapes
from gputopo.placement import Request
from gputopo.placement.preemption import (
    NoPreemption,
    PreemptionPlan,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    gpus_by_node,
    plan_preemption,
)
from gputopo.sim.preemption.cluster_file import ClusterState

__all__ = ["gang_preemptor", "preemption_doc", "preemptor", "print_preemption"]


def preemptor(state: ClusterState, request: Request, priority: int, priority_class: str | None) -> Preemptor:
    """The job as a preemptor: its priority class from the cluster file's, else its spec's priority."""
    if priority_class is None:
        return Preemptor(request, priority)
    found = state.classes.get(priority_class)
    if found is None:
        known = ", ".join(state.classes) or "none in the cluster file"
        raise CliError(
            f"priority class {priority_class!r} is not in the cluster file's priorityClasses; known: {known}"
        )
    return Preemptor(request, found.value, found.policy, checkpoint_wait_s=found.checkpoint_wait_s)


def gang_preemptor(state: ClusterState, gang: Gang, priority_class: str | None) -> Preemptor:
    """A gang from a manifest as a preemptor, every GPU shape (and exclusive part) of it as the operator asks for
    them; its priority class from the cluster file's, else the priority its pods carry."""
    shapes = preemptor_shapes(gang, state.snapshot.tiers)
    if not shapes:
        raise CliError(f"--preempt: gang {gang.id.name} cannot be planned, so it preempts nobody")
    first = preemptor(state, shapes[0].request, gang.priority, priority_class)
    return replace(Preemptor.of_shapes(shapes, first.priority, first.policy), checkpoint_wait_s=first.checkpoint_wait_s)


def _gpus(gpus: dict[str, frozenset[int]]) -> list[dict[str, Any]]:
    return [{"node": node, "gpus": sorted(g)} for node, g in sorted(gpus.items())]


def preemption_doc(state: ClusterState, wanted: Preemptor) -> tuple[dict[str, Any], PreemptionPlan | NoPreemption]:
    result = plan_preemption(state.snapshot, wanted, state.running, PreemptionRules(now=state.now), state.nominations)
    doc: dict[str, Any] = {
        "priority": wanted.priority,
        "preemptionPolicy": wanted.policy.value,
    }
    if isinstance(result, NoPreemption):
        waits = (
            {}
            if result.retry_at is None
            else {"retryAt": result.retry_at, "waitsForCheckpointOf": list(result.details)}
        )
        return {**doc, "possible": False, "reason": result.reason, "details": list(result.details), **waits}, result
    now = state.now
    moved = dict(result.moves)
    return {
        **doc,
        "possible": True,
        "domain": {"level": result.domain.level, "name": result.domain.name},
        "victims": [
            {
                "name": v.name,
                "priority": v.priority,
                "gpus": _gpus(gpus_by_node(v.placement)),
                "workLostGpuHours": round(v.work_lost(now) / 3600, 3),
                "movesTo": moved[v.name].to_api().to_api() if v.name in moved else None,
            }
            for v in result.victims
        ],
        "cost": {
            "highestPriority": result.cost.highest_priority if result.victims else None,
            "workLostGpuHours": round(result.cost.work_lost_gpu_s / 3600, 3),
            "gpusWaiting": result.cost.gpus_waiting,
            "gangsBroken": result.cost.gangs_broken,
            "fragmentation": result.cost.fragmentation,
        },
        "placement": result.placement.to_api().to_api(),
        "tier": result.placement.tier,
        "tierDomain": result.placement.tier_domain,
        "nomination": _gpus(dict(result.nomination.gpus)),
    }, result


def print_preemption(result: PreemptionPlan | NoPreemption, wanted: Preemptor, now: float) -> None:
    policy = "" if wanted.policy is PreemptionPolicy.PREEMPT_LOWER_PRIORITY else f", preemptionPolicy {wanted.policy}"
    if isinstance(result, NoPreemption):
        if result.retry_at is not None:
            typer.echo(
                f"Not yet (priority {wanted.priority}{policy}): {result.reason}; ask again at {result.retry_at:.0f} "
                f"(victims {', '.join(result.details)})"
            )
            return
        typer.echo(f"No preemption helps (priority {wanted.priority}{policy}): {result.reason}")
        for line in result.details:
            typer.echo(f"  - {line}")
        return
    moved = dict(result.moves)
    typer.echo(
        f"Preempt {len(result.victims)} {'gang' if len(result.victims) == 1 else 'gangs'} in {result.domain} "
        f"({result.victim_gpus} GPUs, {result.cost.work_lost_gpu_s / 3600:.2f} GPU-hours of work lost):"
    )
    for v in result.victims:
        where = ", ".join(
            f"{node}:{','.join(map(str, sorted(g)))}" for node, g in sorted(gpus_by_node(v.placement).items())
        )
        move = f"; can move at once to {', '.join(sorted(set(moved[v.name].nodes)))}" if v.name in moved else ""
        typer.echo(f"  {v.name:<24} priority {v.priority:>6}  {where}  lost {v.work_lost(now) / 3600:.2f} GPU-h{move}")
    placement = result.placement
    where = (
        f"tier-{placement.tier} switch {placement.tier_domain}" if placement.tier is not None else "across the top tier"
    )
    shapes = " + ".join(f"{s.request.workers} x {s.request.gpus_per_worker}" for s in wanted.shapes)
    typer.echo(f"then {shapes} GPUs under {where}")
    typer.echo(f"estimated bus bandwidth {placement.busbw_gbps:.1f} GB/s; limited by {placement.bottleneck}")
    for w in placement.workers:
        typer.echo(f"  rank {w.rank:>3}  {w.node:<24} GPUs {','.join(map(str, w.gpus)):<16} NICs {','.join(w.nics)}")
