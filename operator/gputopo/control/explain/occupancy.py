"""Which gang holds which GPU, from the plans in the TrainingJobs' and GangPlacements' statuses, and which gangs
wait: the facts ``status`` and the map share."""

from __future__ import annotations

from dataclasses import dataclass

from gputopo.control.explain.cluster import LiveCluster, job_plan
from gputopo.control.explain.pending import gang_waits, job_waits
from gputopo.control.explain.reasons import PendingReason

__all__ = ["HeldGang", "held_gangs", "waiting"]


@dataclass(frozen=True, slots=True)
class HeldGang:
    """A gang whose plan holds GPUs: ``<namespace>/<name>`` (a foreign gang: its GangPlacement's name)."""

    id: str
    kind: str
    busbw_gbps: float
    bottleneck: str
    workers: tuple[tuple[str, tuple[int, ...]], ...]
    restarts: int = 0

    @property
    def gpu_count(self) -> int:
        return sum(len(g) for _, g in self.workers)


def held_gangs(cluster: LiveCluster) -> list[HeldGang]:
    out = []
    for job in cluster.jobs:
        plan, placement = job_plan(job), job.status.placement
        if plan is not None and placement is not None:
            out.append(
                HeldGang(
                    f"{job.namespace}/{job.name}",
                    "TrainingJob",
                    placement.estimated_bus_bandwidth_g_bps,
                    placement.bottleneck,
                    plan.workers,
                    job.status.restarts,
                )
            )
    for gang in cluster.gangs:
        if gang.ranks and gang.phase not in ("Released", "Preempted"):
            workers = tuple((r.node, r.gpus) for r in gang.ranks)
            out.append(
                HeldGang(
                    f"{gang.key[0]}/{gang.name}",
                    "GangPlacement",
                    gang.busbw_gbps,
                    gang.bottleneck,
                    workers,
                    gang.restarts,
                )
            )
    return out


def waiting(cluster: LiveCluster) -> list[tuple[str, str, PendingReason, str]]:
    """(kind, ``<namespace>/<name>``, reason, message) of every gang that waits, by the operator's own words."""
    out: list[tuple[str, str, PendingReason, str]] = []
    for job in cluster.jobs:
        if (said := job_waits(job)) is not None:
            out.append(("TrainingJob", f"{job.namespace}/{job.name}", *said))
    for gang in cluster.gangs:
        if (told := gang_waits(gang)) is not None:
            out.append(("GangPlacement", f"{gang.key[0]}/{gang.name}", *told))
    return out
