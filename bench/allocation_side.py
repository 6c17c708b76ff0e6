"""One side of ``bench_allocation.py``: the whole trace submitted to a fresh namespace, stamped on its way to
Running, and per job its time, the stages of that time, the real GPUs' bus bandwidth and whether they are the
plan.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from api_metrics import READING, api_requests, api_writes, scrape, watch_events
from cpu import cpu_seconds
from floor import FLOOR_SIDES, Replayer, gang_writes
from gang_trace import BASELINE_LABEL, Job, manifest
from gputopo.api.conditions import PLACED
from gputopo.api.group import LABEL_JOB
from real_gpus import ClusterFacts, device_plugin_gpus, dra_gpus, gang_busbw, pods_by_node, read_cluster, wait_reported
from reporting import stats
from sandbox_run import TraceRun, logger, submit_and_settle, training_job_items
from stamps import JobStamps, PodStamps, Stamper

__all__ = ["NAMESPACES", "SIDES", "STAGES", "log", "run_side"]

SIDES = ("kube-scheduler", "devicePlugin", "dra", *FLOOR_SIDES)
NAMESPACES = {
    "kube-scheduler": "bench-alloc-kube",
    "devicePlugin": "bench-alloc-dp",
    "dra": "bench-alloc-dra",
    "replay": "bench-alloc-replay",
    "minimal": "bench-alloc-minimal",
    "pinned": "bench-alloc-pinned",
}
STAGES = ("submit", "queue", "planning", "writes", "binding", "start")


log = logger("bench-allocation")


def run_side(
    side: str, on: TraceRun, metrics_port: int | None = None, placed: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One side's run. ``placed`` is the devicePlugin side's TrainingJobs (name -> spec and status): that side
    fills it in; a floor side replays it."""
    box, core, custom, trace = on.box, on.core, on.custom, on.trace
    namespace = NAMESPACES[side]
    box.kubectl("create", "namespace", namespace, check=False)
    ours = side != "kube-scheduler"
    submitted, selector = manifest(trace, namespace, operator=ours)
    expected = sum(j.workers for j in trace)
    stamper = Stamper(core, custom, namespace, selector, jobs_too=ours).start()
    time.sleep(1.0)  # the watches are open before anything is submitted
    before = scrape(metrics_port) if metrics_port else {}
    writes_before = api_writes(box)
    reads_before = api_requests(box, READING)
    watched_before = watch_events(box)
    replayer = None
    if side in FLOOR_SIDES:
        specs = {item["metadata"]["name"]: item["spec"] for item in submitted["items"]}
        gangs = {
            name: gang
            for name, job in (placed or {}).items()
            if (gang := gang_writes(side, namespace, name, specs[name], job["status"])) is not None
        }
        replayer = Replayer(str(box.kubeconfig), namespace, gangs).start()
    cpu_before = cpu_seconds()
    log(f"{side}: submitting {len(submitted['items'])} objects")
    run = submit_and_settle(box, submitted, stamper.running, expected, on.args)
    time.sleep(0.5)
    stamper.stop()
    after = scrape(metrics_port) if metrics_port else {}
    writes = api_writes(box) - writes_before
    reads = api_requests(box, READING) - reads_before
    watched = watch_events(box) - watched_before
    cpu = cpu_seconds() - cpu_before  # the floor client's too: read while it still runs
    if replayer is not None:
        replayer.stop()
    pods, jobs = stamper.snapshot()
    running_pods = sum(1 for p in pods.values() if p.running is not None)
    log(f"{side}: {running_pods}/{expected} pods Running; settled after {run.settled_s:.1f} s ({run.because})")

    held_on, facts, reported, fallbacks = _held_gpus(side, core, custom, namespace, trace, pods)
    statuses: dict[str, dict[str, Any]] = {}
    if ours:
        listed = training_job_items(custom, namespace)
        statuses = {item["metadata"]["name"]: item.get("status") or {} for item in listed}
        if side == "devicePlugin" and placed is not None:
            placed.update({item["metadata"]["name"]: item for item in listed})
    waiting = why_waiting(core, namespace, selector, statuses)

    rows: dict[str, dict[str, Any]] = {}
    ranks = equal = 0
    for job in trace:
        row = _job_row(job, pods, jobs, held_on, facts, run.t0, ours)
        status = statuses.get(job.name)
        if status is not None:
            row["phase"] = status.get("phase")
            placement = status.get("placement") or {}
            generation = int(placement.get("generation") or 0)
            plan = (jobs[job.name].plans.get(generation) if job.name in jobs else None) or {}
            row["generation"] = generation
            if row["running"] and plan:
                matches = [held_on.get(f"{job.name}-{rank}") == plan[rank] for rank in sorted(plan)]
                ranks += len(matches)
                equal += sum(matches)
                row["ranks_as_planned"] = sum(matches)
        rows[job.name] = row

    up_rows = [r for r in rows.values() if r["running"]]
    times = [r["seconds"] for r in up_rows]
    multi = [(rows[j.name]["busbw_gbps"], j.gpus) for j in trace if j.gpus > 1 and "busbw_gbps" in rows[j.name]]
    result: dict[str, Any] = {
        **run.result_head(namespace, len(submitted["items"]), expected),
        "pods_running": running_pods,
        "jobs_running": len(up_rows),
        "partial_gangs": sum(1 for r in rows.values() if not r["running"] and r["pods_running"]),
        "time_per_job_s": stats(times),
        "time_whole_trace_s": max(times) if times else None,
        "busbw_mean_gbps": statistics.fmean(b for b, _ in multi) if multi else None,
        "busbw_gpu_weighted_gbps": sum(b * g for b, g in multi) / sum(g for _, g in multi) if multi else None,
        "pods_with_real_gpus": reported,
        "pods_gpus_from_lowest_free_indices": fallbacks,
        "clock_check": clock_check(pods, jobs, run.wall0, run.t0),
        **({"replay_errors": replayer.errors[:20]} if replayer is not None else {}),
        "not_running": waiting,
        "api_writes": dict(writes.most_common()),
        "api_writes_total": sum(writes.values()),
        "api_reads": dict(reads.most_common()),
        "watch_events": dict(watched.most_common()),
        "cpu_seconds": {name: round(seconds, 2) for name, seconds in cpu.most_common()},
        "jobs": rows,
    }
    if ours:
        result["ranks_compared"] = ranks
        result["ranks_as_planned"] = equal
        result["share_as_planned"] = equal / ranks if ranks else None
        result["phases"] = dict(Counter(str(s.get("phase")) for s in statuses.values()))
        result["generations_above_1"] = sum(1 for r in rows.values() if int(r.get("generation") or 0) > 1)
        result["operator_metrics"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    result["stages"] = stage_summary(up_rows, result.get("operator_metrics"), ours)
    return result


def _held_gpus(
    side: str, core: Any, custom: Any, namespace: str, trace: Sequence[Job], pods: Mapping[str, PodStamps]
) -> tuple[dict[str, tuple[str, list[int]]], ClusterFacts, int, int]:
    """The GPUs each pod really holds (pod -> node and GPUs), the cluster as read after, how many pods the
    probes (or the ResourceClaims) reported, and how many took the lowest free indices instead."""
    if side == "dra":
        held_on = dra_gpus(custom, core, namespace)
        return held_on, read_cluster(core, custom), len(held_on), 0
    running = {pod: stamps.node for pod, stamps in pods.items() if stamps.running is not None}
    reported = wait_reported(custom, namespace, len(running))
    facts = read_cluster(core, custom)
    held, fallbacks = device_plugin_gpus(namespace, pods_by_node(trace, running), facts)
    return {pod: (pods[pod].node, gpus) for pod, gpus in held.items()}, facts, reported, fallbacks


def _job_row(
    job: Job,
    pods: Mapping[str, PodStamps],
    jobs: Mapping[str, JobStamps],
    held_on: Mapping[str, tuple[str, list[int]]],
    facts: ClusterFacts,
    t0: float,
    ours: bool,
) -> dict[str, Any]:
    """A job's row: Running or not; if Running, its time, its real GPUs' bus bandwidth and its stages."""
    names = job.pods()
    up = [pods[p] for p in names if p in pods and pods[p].running is not None]
    row: dict[str, Any] = {"running": len(up) == job.workers, "pods_running": len(up)}
    if row["running"]:
        row["seconds"] = max(p.running for p in up if p.running is not None) - t0
        members: dict[str, list[int]] = {}
        for p in names:
            node, gpus = held_on.get(p, (pods[p].node, []))
            members.setdefault(node, []).extend(gpus)
        if all(len(g) for g in members.values()) and sum(map(len, members.values())) == job.gpus:
            row["busbw_gbps"], row["bottleneck"], row["span"] = gang_busbw(members, facts)
        row["stages"] = stages(job, pods, jobs.get(job.name), t0, ours)
    return row


def why_waiting(core: Any, namespace: str, selector: str, statuses: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Why what is not Running waits, counted: each unbound pod's PodScheduled reason and message (its first
    clause), and each job's Placed reason where it has no pods."""
    found: Counter[str] = Counter()
    listed = json.loads(core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False).data)
    with_pods = set()
    for pod in listed["items"]:
        labels = pod["metadata"].get("labels") or {}
        with_pods.add(labels.get(LABEL_JOB) or labels.get(BASELINE_LABEL))
        if (pod.get("status") or {}).get("phase") == "Running":
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") != "True":
                found[f"pod {cond.get('reason')}: {str(cond.get('message', '')).split('.')[0][:120]}"] += 1
    for name, status in statuses.items():
        if status.get("phase") != "Running" and name not in with_pods:
            placed: Mapping[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == PLACED), {})
            found[f"job {status.get('phase')}, {PLACED} {placed.get('reason')}"] += 1
    return dict(found.most_common(10))


def stages(
    job: Job, pods: Mapping[str, PodStamps], stamps: JobStamps | None, t0: float, ours: bool
) -> dict[str, float]:
    """The stage times of one Running job, seconds (planning is split off later, from the metrics)."""
    gang = [pods[p] for p in job.pods()]
    created = max(p.created for p in gang)
    bound = max(p.bound for p in gang if p.bound is not None)
    running = max(p.running for p in gang if p.running is not None)
    if not ours or stamps is None or stamps.planned is None:
        return {"submit": created - t0, "binding": max(0.0, bound - created), "start": max(0.0, running - bound)}
    return {
        "submit": stamps.created - t0,
        "queue+planning": max(0.0, stamps.planned - stamps.created),
        "writes": max(0.0, created - stamps.planned),
        "binding": max(0.0, bound - created),
        "start": max(0.0, running - bound),
    }


def stage_summary(rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, float] | None, ours: bool) -> dict[str, Any]:
    keys = ("submit", "queue+planning", "writes", "binding", "start") if ours else ("submit", "binding", "start")
    out: dict[str, Any] = {k: stats([r["stages"][k] for r in rows if k in r.get("stages", {})]) for k in keys}
    if ours and metrics:
        decisions = metrics.get("gputopo_placement_decision_seconds_count", 0.0)
        planner = metrics.get("gputopo_placement_decision_seconds_sum", 0.0)
        per_job = planner / decisions if decisions else 0.0
        out["planning"] = {"per_decision_mean_s": per_job, "decisions": decisions, "total_s": planner}
        out["passes"] = {
            "count": metrics.get("gputopo_control_pass_seconds_count", 0.0),
            "total_s": metrics.get("gputopo_control_pass_seconds_sum", 0.0),
        }
        gangs = metrics.get("gputopo_gang_slot_wait_seconds_count", 0.0)
        if gangs:
            out["slot_wait"] = {
                "mean_s": metrics.get("gputopo_gang_slot_wait_seconds_sum", 0.0) / gangs,
                "gangs": gangs,
            }
        queue = [max(0.0, r["stages"]["queue+planning"] - per_job) for r in rows if "queue+planning" in r["stages"]]
        out["queue"] = stats(queue)
    return out


def clock_check(
    pods: Mapping[str, PodStamps], jobs: Mapping[str, JobStamps], wall0: float, t0: float
) -> dict[str, Any]:
    """How far the watch stamps trail the API server's whole-second times (should be 0 to ~1 s)."""
    bound_lag = [
        (wall0 + p.bound - t0) - p.scheduled_api for p in pods.values() if p.bound is not None and p.scheduled_api
    ]
    created_lag = [(wall0 + j.created - t0) - j.created_api for j in jobs.values() if j.created_api]
    return {
        "bound_minus_PodScheduled_s": stats(bound_lag) | {"min": min(bound_lag) if bound_lag else None},
        "job_seen_minus_creationTimestamp_s": stats(created_lag) | {"min": min(created_lag) if created_lag else None},
    }
