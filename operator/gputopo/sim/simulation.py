"""Replay a trace of job arrivals and departures against a cluster under one placement policy.

Jobs wait in arrival order; whenever GPUs free up the queue is tried again in order (jobs behind a
blocked one may start: backfill without reservations). Each placed job is also given to the exact
solver on the same snapshot, so the policy's bus bandwidth can be put against the best possible (not on
clusters with multi-node NVLink domains, which the reference's ILP does not model).
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gputopo.placement.types import GpuChoice, Placement, Policy, Request, Snapshot
from gputopo.sim.exact import optimum
from gputopo.sim.generate import TraceJob

__all__ = ["JobOutcome", "PolicyReport", "fragmentation", "simulate"]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job: str
    gpus: int
    wait: float
    busbw_gbps: float
    optimum_gbps: float | None
    nodes: int
    one_leaf: bool
    nvlink_domains: int = 0  # distinct multi-node NVLink domains the job's nodes are in


@dataclass(slots=True)
class PolicyReport:
    policy: str
    outcomes: list[JobOutcome] = field(default_factory=list)
    never_placed: int = 0
    gpu_seconds_used: float = 0.0
    gpu_seconds_total: float = 0.0
    fragmentation_samples: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | None]:
        comm = [o for o in self.outcomes if o.gpus > 1]
        rated = [o for o in comm if o.optimum_gbps]
        multi = [o for o in comm if o.nodes > 1]
        in_domains = [o for o in multi if o.nvlink_domains]
        busbw = [o.busbw_gbps for o in comm]
        ratio = sum(o.busbw_gbps for o in rated) / sum(o.optimum_gbps or 0 for o in rated) if rated else None
        return {
            "jobs_placed": len(self.outcomes),
            "jobs_never_placed": self.never_placed,
            "mean_busbw_GBps": statistics.fmean(busbw) if busbw else None,
            "median_busbw_GBps": statistics.median(busbw) if busbw else None,
            "mean_optimal_busbw_GBps": statistics.fmean(o.optimum_gbps or 0 for o in rated) if rated else None,
            "ratio_to_optimal": ratio,
            "jobs_rated": len(rated),
            "share_multi_node_in_one_tier": sum(o.one_leaf for o in multi) / len(multi) if multi else None,
            "share_multi_node_in_one_nvlink_domain": (
                sum(o.nvlink_domains == 1 for o in in_domains) / len(in_domains) if in_domains else None
            ),
            "gpu_utilisation": self.gpu_seconds_used / self.gpu_seconds_total if self.gpu_seconds_total else 0.0,
            "mean_wait_s": statistics.fmean(o.wait for o in self.outcomes) if self.outcomes else 0.0,
            "mean_fragmentation": statistics.fmean(self.fragmentation_samples) if self.fragmentation_samples else 0.0,
        }


def fragmentation(snapshot: Snapshot) -> float:
    """Share of free GPUs stranded on partly used nodes (0: every free GPU sits on an empty node)."""
    free = stranded = 0
    for node in snapshot:
        n = len(node.free_gpus)
        free += n
        if node.used_gpus:
            stranded += n
    return stranded / free if free else 0.0


def _reference(snapshot: Snapshot, request: Request) -> float | None:
    """The reference optimum, or None where neither reference method applies (the job is then not rated)."""
    try:
        return optimum(snapshot, request)
    except (RuntimeError, ValueError):
        return None


def simulate(
    snapshot: Snapshot,
    trace: Sequence[TraceJob],
    policy_name: str,
    policy: Policy,
    *,
    exact: bool = True,
    on_event: Callable[[int, int], None] | None = None,
    gpu_choice: GpuChoice = GpuChoice.PLANNED,
) -> PolicyReport:
    """Replay the trace's arrivals and departures; ``gpu_choice`` is who picks a worker's GPUs within its node
    (for the policies that plan them: gputopo's own search, or NVIDIA's device plugin as in devicePlugin mode)."""
    report = PolicyReport(policy_name)
    # The ILP reference does not model multi-node NVLink domains, so on such clusters no optimum is computed.
    exact = exact and not any(snapshot.nvlink_domains)
    events: list[tuple[float, int, int, Placement | None]] = []  # (time, kind 0=departure 1=arrival, job)
    for i, job in enumerate(trace):
        heapq.heappush(events, (job.arrival, 1, i, None))
    queue: list[int] = []
    total_gpus = snapshot.total_gpus
    now = trace[0].arrival if trace else 0.0
    done, total = 0, 2 * len(trace)
    while events:
        time, kind, i, placement = heapq.heappop(events)
        used = snapshot.used_gpus
        report.gpu_seconds_used += used * (time - now)
        report.gpu_seconds_total += total_gpus * (time - now)
        now = time
        if kind == 0 and placement is not None:
            snapshot = snapshot.release(placement)
        else:
            queue.append(i)
        waiting = []
        for j in queue:
            job = trace[j]
            request = Request(
                job.workers,
                job.gpus_per_worker,
                name=job.name,
                same_model=False,
                slice_size=job.slice_size,
                gpu_choice=gpu_choice,
            )
            result = policy(snapshot, request)
            if not isinstance(result, Placement):
                waiting.append(j)
                continue
            best = _reference(snapshot, request) if exact else None
            tier_ok = result.tier == 0 and len(set(result.nodes)) > 1
            nvlink = {snapshot.nvlink_domains[snapshot.index_of(n)] for n in result.nodes} - {""}
            report.outcomes.append(
                JobOutcome(job.name, job.gpus, now - job.arrival, result.busbw_gbps, best,
                           len(set(result.nodes)), tier_ok, len(nvlink))
            )  # fmt: skip
            report.fragmentation_samples.append(fragmentation(snapshot))
            snapshot = snapshot.reserve(result)
            heapq.heappush(events, (now + job.duration, 0, j, result))
        queue = waiting
        done += 1
        if on_event is not None:
            on_event(done, total)
    report.never_placed = len(queue)
    return report
