"""What preemption would do for a waiting TrainingJob, as the operator's own search (``plan_preemption``) answers
it on the listed cluster: the gangs it would end and the domain they clear, or why none helps. A dry run: the
operator decides for real on its own pass, with its own budgets."""

from __future__ import annotations

from typing import Any

from gputopo.control.explain.cluster import LiveCluster
from gputopo.control.facts import JobFacts
from gputopo.control.holders import job_holder
from gputopo.control.preemptions import gang_name
from gputopo.control.priority import job_priority
from gputopo.placement.preemption import (
    NoPreemption,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    RunningGang,
    gpus_by_node,
    plan_preemption,
)
from gputopo.placement.types import Request

__all__ = ["job_preemption", "running_gangs"]


def running_gangs(cluster: LiveCluster, skip: str = "") -> list[RunningGang]:
    """The TrainingJobs that hold GPUs now, as victims are read (their class's priority, their terms); worked out
    once per listing."""
    found: list[RunningGang] | None = cluster.memo.get("running")
    if found is None:
        found = cluster.memo["running"] = []
        for job in cluster.jobs:
            placement = job.status.placement
            if job.spec is None or placement is None or job.status.phase.value not in ("Running", "Placing"):
                continue
            priority = job_priority(job.spec, cluster.classes).value
            holder = job_holder(job, placement, priority, job.status.start_time, cluster.snapshot)
            if holder is not None:
                found.append(holder.running)
    return [g for g in found if g.name != skip]


def job_preemption(cluster: LiveCluster, job: JobFacts, request: Request) -> dict[str, Any]:
    assert job.spec is not None
    priority = job_priority(job.spec, cluster.classes)
    doc: dict[str, Any] = {"priority": priority.value, "preemptionPolicy": str(priority.policy.value)}
    if priority.policy is PreemptionPolicy.NEVER:
        return {**doc, "possible": False, "words": f"its class (priority {priority.value}) has preemptionPolicy Never"}
    now = cluster.now.timestamp()
    wanted = Preemptor(request, priority.value, priority.policy, checkpoint_wait_s=priority.checkpoint_wait_s)
    running = running_gangs(cluster, skip=gang_name(job.key))
    result = plan_preemption(cluster.snapshot, wanted, running, PreemptionRules(now=now))
    if isinstance(result, NoPreemption):
        return {**doc, "possible": False, "words": f"none would help (priority {priority.value}): {result}"}
    victims = [
        f"{v.name} (priority {v.priority}, {v.gpu_count} GPUs on "
        f"{', '.join(sorted(gpus_by_node(v.placement)))}, {v.work_lost(now) / 3600:.2f} GPU-hours lost)"
        for v in result.victims
    ]
    placed = result.placement
    return {
        **doc,
        "possible": True,
        "domain": str(result.domain),
        "victims": [v.name for v in result.victims],
        "victimWords": victims,
        "busBandwidthGBps": placed.busbw_gbps,
        "words": (
            f"would end {len(victims)} {'gang' if len(victims) == 1 else 'gangs'} in {result.domain} "
            f"({result.victim_gpus} GPUs), then place at {placed.busbw_gbps:.1f} GB/s"
        ),
    }
