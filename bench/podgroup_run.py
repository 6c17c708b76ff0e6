"""The trace as Kubernetes PodGroup gangs, for ``bench_gangs.py``: one hand-made PodGroup per job
(``scheduling.k8s.io/v1beta1``, ``spec.schedulingPolicy.gang.minCount`` = its pods) and its bare pods, which
name it in ``spec.schedulingGroup.podGroupName``; and one way of running a trace on the sandbox, whatever
places it, down to each job's time to Running, bus bandwidth and the GPUs its partial gang held.

Bare pods, not Indexed Jobs: the sandbox's kwok completes a Job's pods as soon as they run (its default
``pod-complete`` stage selects pods a Job owns), while the trace's pods, as ``bench_operator.py``'s, hold their
GPUs until the run settles. A Job with ``spec.scheduling`` gets the same kind of PodGroup from the Job
controller, which kube-scheduler and gputopo read the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gang_trace import BASELINE_LABEL, Job
from gputopo.api.group import GPU_RESOURCE, LABEL_RANK
from gputopo.gangs.model import GATE
from real_gpus import device_plugin_gpus, gang_busbw, pods_by_node, read_cluster, wait_reported
from sandbox_run import TraceRun, submit_and_settle, training_job_items
from side_costs import Costs
from stamps import JobStamps, PodStamps, Stamper

__all__ = [
    "PODGROUPS",
    "Way",
    "gang_placement_busbw",
    "idle_in_partial_gangs",
    "podgroup_gangs",
    "run_way",
    "trainingjob_busbw",
]

PODGROUPS = "podgroups.v1beta1.scheduling.k8s.io"


def _pod(job: Job, rank: int, namespace: str, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "schedulingGroup": {"podGroupName": job.name},
        "containers": [
            {"name": "trainer", "image": "pytorch", "resources": {"limits": {GPU_RESOURCE: str(job.gpus_per_worker)}}}
        ],
    }
    if gated:  # what the chart's admission policy adds to a gang's GPU pod
        spec["schedulingGates"] = [{"name": GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job.name}-{rank}",
            "namespace": namespace,
            "labels": {BASELINE_LABEL: job.name, LABEL_RANK: str(rank)},
        },
        "spec": spec,
    }


def podgroup_gangs(jobs: Sequence[Job], namespace: str, gated: bool) -> dict[str, Any]:
    """A List of each job's PodGroup (gang of all its pods) followed by its pods, gated by gputopo or not."""
    items: list[dict[str, Any]] = []
    for job in jobs:
        items.append(
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": job.name, "namespace": namespace},
                "spec": {"schedulingPolicy": {"gang": {"minCount": job.workers}}},
            }
        )
        items += [_pod(job, rank, namespace, gated) for rank in range(job.workers)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def gang_placement_busbw(custom: Any, namespace: str) -> dict[str, float]:
    """PodGroup name -> the bus bandwidth gputopo's GangPlacement for it estimates."""
    listed = custom.list_namespaced_custom_object("gputopo.io", "v1alpha1", namespace, "gangplacements")
    found: dict[str, float] = {}
    for item in listed["items"]:
        status = item.get("status") or {}
        if status.get("estimatedBusBandwidthGBps") is not None:
            found[str((item.get("spec") or {}).get("gang"))] = float(status["estimatedBusBandwidthGBps"])
    return found


def trainingjob_busbw(custom: Any, namespace: str) -> dict[str, float]:
    """TrainingJob name -> the bus bandwidth gputopo's placement of it estimates (its status)."""
    found: dict[str, float] = {}
    for item in training_job_items(custom, namespace):
        placement = (item.get("status") or {}).get("placement") or {}
        if placement.get("estimatedBusBandwidthGBps") is not None:
            found[item["metadata"]["name"]] = float(placement["estimatedBusBandwidthGBps"])
    return found


def idle_in_partial_gangs(
    trace: Sequence[Job], pods: Mapping[str, PodStamps], t0: float, end: float
) -> dict[str, float]:
    """GPUs held by bound pods of gangs not all Running: a pod's GPUs count from the moment it is seen bound
    until its whole gang is Running (or until ``end``, the side settled). Their integral (GPU-seconds), peak and
    what is left at ``end``."""
    steps: list[tuple[float, int]] = []  # (seconds since t0, change of idle GPUs)
    left = 0
    for job in trace:
        stamps = [pods.get(p) for p in job.pods()]
        running = [s.running for s in stamps if s is not None and s.running is not None]
        whole = max(running) if len(running) == job.workers else None
        for s in stamps:
            if s is None or s.bound is None:
                continue
            until = end if whole is None else min(whole, end)
            if until > s.bound:
                steps += [(s.bound - t0, job.gpus_per_worker), (until - t0, -job.gpus_per_worker)]
            if whole is None or whole > end:
                left += job.gpus_per_worker
    steps.sort()
    integral = peak = 0.0
    level, last = 0, 0.0
    for at, change in steps:
        integral += level * (at - last)
        level, last = level + change, at
        peak = max(peak, level)
    return {"gpu_seconds": integral, "peak_gpus": peak, "gpus_at_end": float(left)}


def _created(job: Job, pods: Mapping[str, PodStamps], owners: Mapping[str, JobStamps] | None = None) -> float | None:
    """When the job was first seen created: its TrainingJob (``owners``), else its first pod."""
    if owners is not None:
        owner = owners.get(job.name)
        return owner.created if owner is not None else None
    seen = [s.created for p in job.pods() if (s := pods.get(p)) is not None]
    return min(seen) if seen else None


@dataclass(frozen=True)
class Way:
    """One way of placing the trace: its name, namespace, what it submits and the label selecting its pods,
    and where the placer's own bus-bandwidth estimate of each job is read (job -> GB/s; none for
    kube-scheduler)."""

    name: str
    namespace: str
    manifest: Mapping[str, Any]
    selector: str
    placer_busbw: Callable[[], dict[str, float]] | None = None
    owner_jobs: bool = False  # the operator makes the pods: a job is created with its TrainingJob
    workloads: bool = False  # the TrainingJobs run under Kueue's quota: when Kueue admitted each is stamped


def run_way(way: Way, on: TraceRun, log: Callable[[str], None]) -> dict[str, Any]:
    """Submit ``way``'s manifest in one go, wait until it settles; per job its time to Running (every pod
    Running, since submission began and since the job was first seen), the estimated bus bandwidth of the GPUs
    its pods got, the GPUs idle in partial gangs; the API server's writes and each component's CPU seconds."""
    trace = on.trace
    expected = sum(j.workers for j in trace)
    clock = Stamper(
        on.core, on.custom, way.namespace, way.selector, jobs_too=way.owner_jobs, workloads_too=way.workloads
    ).start()
    time.sleep(1.0)  # the watch is open before anything is submitted
    log(f"{way.name}: submitting {len(way.manifest['items'])} objects")
    costs = Costs.read(on.box)
    run = submit_and_settle(on.box, way.manifest, clock.running, expected, on.args)
    end = time.monotonic()
    # everyone's writes (the submission, kube-scheduler, kwok, the operator) and every component's CPU seconds,
    # read while the side's processes still run
    spent = costs.since(on.box)
    clock.stop()
    stamps, job_stamps = clock.snapshot()
    workloads, admitted = clock.admissions()
    running_at, nodes = clock.running_on()
    log(f"{way.name}: {len(running_at)}/{expected} pods Running; settled after {run.settled_s:.1f} s ({run.because})")

    placer = way.placer_busbw() if way.placer_busbw else {}
    pods_on = pods_by_node(trace, nodes)
    reported = wait_reported(on.custom, way.namespace, len(running_at))
    facts = read_cluster(on.core, on.custom)
    held, fallbacks = device_plugin_gpus(way.namespace, pods_on, facts)

    rows: dict[str, dict[str, Any]] = {}
    for job in trace:
        up = [p for p in job.pods() if p in running_at]
        row: dict[str, Any] = {"running": len(up) == job.workers, "pods_running": len(up)}
        if job.name in workloads:
            row["workload_s"] = workloads[job.name] - run.t0
        if job.name in admitted:
            row["admitted_s"] = admitted[job.name] - run.t0
        if row["running"]:
            row["seconds"] = max(running_at[p] for p in up) - run.t0
            created = _created(job, stamps, job_stamps) if way.owner_jobs else _created(job, stamps)
            if created is not None:
                row["from_creation_s"] = max(running_at[p] for p in up) - created
            members: dict[str, list[int]] = {}
            for p in up:
                members.setdefault(nodes[p], []).extend(held[p])
            busbw, bottleneck, tier = gang_busbw(members, facts)
            row |= {"busbw_gbps": busbw, "bottleneck": bottleneck, "span": tier, "nodes": sorted(members)}
            if job.name in placer:
                row["placer_busbw_gbps"] = placer[job.name]
        rows[job.name] = row
    times = [r["seconds"] for r in rows.values() if r["running"]]
    deltas = [abs(r["busbw_gbps"] - r["placer_busbw_gbps"]) for r in rows.values() if "placer_busbw_gbps" in r]
    return {
        **run.result_head(way.namespace, len(way.manifest["items"]), expected),
        "pods_running": len(running_at),
        "jobs_running": sum(1 for r in rows.values() if r["running"]),
        "partial_gangs_at_end": sum(1 for r in rows.values() if not r["running"] and r["pods_running"]),
        "idle_in_partial_gangs": idle_in_partial_gangs(trace, stamps, run.t0, end),
        "last_job_running_s": max(times) if times else None,
        "first_pod_running_s": min(running_at.values()) - run.t0 if running_at else None,
        "pods_reported_by_probes": reported,
        "pods_gpus_from_lowest_free_indices": fallbacks,
        "placer_vs_recomputed_busbw_max_abs_gbps": max(deltas) if deltas else None,
        **spent,
        "jobs": rows,
    }
