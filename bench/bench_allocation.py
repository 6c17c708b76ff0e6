"""The GPUs the operator plans against the GPUs the pods get, and where gputopo's time to Running goes.

One run, the trace and sandbox of ``bench_operator.py`` (256-node ``mixed`` sandbox, fake probes, 200 jobs of
mixed sizes, seed 7), six sides, each on a sandbox brought up for it and getting the whole trace in one
``kubectl create`` of a List into a fresh namespace, the same time after ``up`` (kwok heartbeats every node of a
sandbox at once tens of seconds after ``up``: a side that met that storm of Node writes would not compare):

* ``kube-scheduler``: kube-scheduler alone (operator stopped), one plain pod per worker with the same
  ``nvidia.com/gpu`` limit;
* ``devicePlugin``: the operator in ``gpuAllocation: devicePlugin`` mode, on a sandbox whose fake probes give
  each pod the GPUs NVIDIA's device plugin would (``--fake-allocation device-plugin``: its best-effort
  choice on the node's free GPUs; it never sees the plan), as the first side's sandbox does;
* ``dra``: the operator in ``gpuAllocation: dra`` mode on a sandbox started with ``gpu_allocation="dra"`` (fake
  ResourceSlices of NVIDIA's DRA driver; kube-scheduler allocates each rank's ResourceClaim);
* the floor, ``replay``, ``minimal`` and ``pinned`` (``bench/floor.py``): no operator; a client in a process of
  its own that decides nothing writes the devicePlugin side's placements as each TrainingJob is seen: write for write as
  the operator did, with the least writes that keep the status contract (one status write, after the pods), and
  with no status at all. What is left is what the rest of the cluster needs for those writes on this machine.

Per side: time to Running per job (p50 / p90 / max) and for the whole trace; estimated bus bandwidth, one
estimator for every side (``bench_operator.gang_busbw``: ``gputopo.topology.estimate_gang`` on the real GPUs
with the operator's tier oversubscription); the share of ranks whose real GPUs equal the operator's plan.
Real GPUs: in devicePlugin mode the probes' PodResources report (NodePodGpus ``status.pods``); in dra mode
the rank's ResourceClaim ``status.allocation.devices.results`` (device ``gpu-<i>`` is GPU ``i``). The plan is
the placement as first seen in the job's status for its last generation (the operator later rewrites a
devicePlugin job's status to the GPUs the probes report, so the final status is not the plan).

Per-stage breakdown of gputopo's time to Running, per job, from when things reached this process:

* submit: the start of ``kubectl create`` -> the TrainingJob's ADDED event on a TrainingJob watch;
* queue + planning: ADDED -> the first watch event whose ``status.placement`` has workers (the status write
  that carries the plan; the operator writes it before it creates anything);
* planning alone: the planner's own time, from the operator's Prometheus metrics
  (``gputopo_placement_decision_seconds``, one observation per job decision;
  ``gputopo_control_pass_seconds``, one per control pass, API calls included), scraped after the side settles;
  queue wait = (queue + planning) - the job's mean planner time; of it, how long a placed gang's writes waited
  for an API slot (``gputopo_gang_slot_wait_seconds``, its mean over the gangs);
* API writes: plan seen -> the last of the gang's pods seen ADDED on a pod watch (the Service and, in dra mode,
  the ResourceClaims are created before the pods);
* ungating: -> the last pod seen with no ``schedulingGates``;
* binding: -> the last pod seen with ``spec.nodeName`` (kube-scheduler bound it);
* start: -> the last pod seen Running (kwok marks a bound pod Running; no containers).

The watch stamps are ``time.monotonic()`` at arrival. They are checked against the API server's own whole-second
times: each pod's ``PodScheduled`` condition ``lastTransitionTime`` and each TrainingJob's ``creationTimestamp``
(the report gives the lag of the watch behind them, which must lie in [0, 1 s + delivery)).

Writes bench/reports/allocation.{json,md,png}.
Run: python bench/bench_allocation.py [--jobs 200 --nodes 256 --seed 7 --sides kube-scheduler,devicePlugin,dra,...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench_operator import (
    BASELINE_LABEL,
    REPORTS,
    Job,
    baseline_pods,
    device_plugin_gpus,
    gang_busbw,
    log_problems,
    make_trace,
    read_cluster,
    report_head,
    settle,
    start_operator,
    trace_config,
    training_jobs,
    wait_reported,
)
from cpu import cpu_seconds
from floor import FLOOR_SIDES, Replayer, gang_writes
from gputopo.api.group import DRA_DRIVER, LABEL_JOB
from gputopo.kube.client import load_configuration
from gputopo.sandbox import Sandbox
from watching import Watcher

SIDES = ("kube-scheduler", "devicePlugin", "dra", *FLOOR_SIDES)
NAMESPACES = {
    "kube-scheduler": "bench-alloc-kube",
    "devicePlugin": "bench-alloc-dp",
    "dra": "bench-alloc-dra",
    "replay": "bench-alloc-replay",
    "minimal": "bench-alloc-minimal",
    "pinned": "bench-alloc-pinned",
}
STAGES = ("submit", "queue", "planning", "writes", "ungating", "binding", "start")
GOAL_RATIO = 1.5


def _log(message: str) -> None:
    print(f"[bench-allocation] {message}", file=sys.stderr, flush=True)


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "max": None, "mean": None}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p90": p90, "max": ordered[-1], "mean": statistics.fmean(ordered)}


def _api_time(text: Any) -> float | None:
    """An API timestamp (RFC 3339, whole seconds) as epoch seconds."""
    if isinstance(text, datetime):
        return text.timestamp()
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


# -- stamping what arrives ---------------------------------------------------------------------------------------


@dataclass
class PodStamps:
    created: float
    ungated: float | None = None
    bound: float | None = None
    running: float | None = None
    node: str = ""
    scheduled_api: float | None = None  # PodScheduled lastTransitionTime, epoch s


@dataclass
class JobStamps:
    created: float
    created_api: float | None = None  # creationTimestamp, epoch s
    planned: float | None = None
    plans: dict[int, dict[int, tuple[str, list[int]]]] = field(default_factory=dict)  # generation -> rank -> plan


@dataclass
class Stamper:
    """Watches the pods and (optionally) the TrainingJobs of one namespace; stamps each stage once."""

    core: Any
    custom: Any
    namespace: str
    selector: str
    jobs_too: bool
    pods: dict[str, PodStamps] = field(default_factory=dict)
    jobs: dict[str, JobStamps] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watchers: list[Watcher] = field(default_factory=list)

    def start(self) -> Stamper:
        self._watchers.append(
            Watcher(
                self.core.list_namespaced_pod,
                (self.namespace,),
                {"label_selector": self.selector},
                self._pod,
                name="pod-stamps",
                raw=True,
            ).start()
        )
        if self.jobs_too:
            args = ("gputopo.io", "v1alpha1", self.namespace, "trainingjobs")
            call = self.custom.list_namespaced_custom_object
            self._watchers.append(Watcher(call, args, {}, self._job, name="job-stamps").start())
        return self

    def stop(self) -> None:
        for watcher in self._watchers:
            watcher.stop()

    def running(self) -> int:
        with self._lock:
            return sum(1 for p in self.pods.values() if p.running is not None)

    def _pod(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            return
        node = spec.get("nodeName")
        with self._lock:
            stamps = self.pods.setdefault(meta["name"], PodStamps(now))
            if stamps.ungated is None and not spec.get("schedulingGates"):
                stamps.ungated = now
            if stamps.bound is None and node:
                stamps.bound, stamps.node = now, node
            if stamps.scheduled_api is None:
                for cond in status.get("conditions") or []:
                    if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                        stamps.scheduled_api = _api_time(cond.get("lastTransitionTime"))
            if stamps.running is None and node and status.get("phase") == "Running":
                stamps.running = now

    def _job(self, job: dict[str, Any], now: float) -> None:
        meta = job.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        placement = (job.get("status") or {}).get("placement") or {}
        with self._lock:
            stamps = self.jobs.setdefault(meta["name"], JobStamps(now, _api_time(meta.get("creationTimestamp"))))
            workers = placement.get("workers") or []
            generation = int(placement.get("generation") or 0)
            if workers and generation not in stamps.plans:
                stamps.plans[generation] = {int(w["rank"]): (w["node"], sorted(w["gpus"])) for w in workers}
                if stamps.planned is None:
                    stamps.planned = now


# -- the operator's metrics --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """Sums and counts of the operator's histograms (``name_sum`` / ``name_count``, labels summed over)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        if base.endswith(("_sum", "_count")):
            found[base] = found.get(base, 0.0) + float(value)
    return found


_MUTATING = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
_READING = ("GET", "LIST", "WATCH", "WATCHLIST")


def api_writes(box: Sandbox) -> Counter[str]:
    """The API server's own count of writes so far (``apiserver_request_total``), by verb and resource."""
    return api_requests(box, _MUTATING)


def watch_events(box: Sandbox) -> Counter[str]:
    """Watch events the API server has sent so far, by resource (``apiserver_watch_events_total``): what every
    watcher was sent, the background (Node heartbeats, leases) included."""
    found: Counter[str] = Counter()
    for line in box.kubectl("get", "--raw", "/metrics", timeout=60).splitlines():
        if line.startswith("apiserver_watch_events_total{"):
            labels, _, value = line.rpartition(" ")
            fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(","))
            found[fields.get("resource", "").strip('"')] += int(float(value))
    return found


def api_requests(box: Sandbox, verbs: Collection[str]) -> Counter[str]:
    """The API server's own count of requests of these verbs so far, by verb and resource."""
    found: Counter[str] = Counter()
    for line in box.kubectl("get", "--raw", "/metrics", timeout=60).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(","))
        verb = fields.get("verb", "").strip('"')
        if verb in verbs:
            sub = fields.get("subresource", "").strip('"')
            found[f"{verb} {fields.get('resource', '').strip(chr(34))}{'/' + sub if sub else ''}"] += int(float(value))
    return found


# -- the real GPUs ------------------------------------------------------------------------------------------------


def dra_gpus(custom: Any, core: Any, namespace: str) -> dict[str, tuple[str, list[int]]]:
    """pod -> (node, GPU indices) from the ResourceClaim each pod names: its allocation's devices."""
    listed = custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")
    held: dict[str, tuple[str, list[int]]] = {}
    claims = {c["metadata"]["name"]: c for c in listed["items"]}
    for pod in core.list_namespaced_pod(namespace, label_selector=LABEL_JOB).items:
        for ref in pod.spec.resource_claims or []:
            claim = claims.get(ref.resource_claim_name or "")
            allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
            results = [r for r in (allocation.get("devices") or {}).get("results") or [] if r["driver"] == DRA_DRIVER]
            if results:
                pools = {r["pool"] for r in results}
                held[pod.metadata.name] = (
                    pools.pop() if len(pools) == 1 else "?",
                    sorted(int(r["device"].removeprefix("gpu-")) for r in results),
                )
    return held


# -- one side -----------------------------------------------------------------------------------------------------


def run_side(
    side: str,
    box: Sandbox,
    core: Any,
    custom: Any,
    trace: Sequence[Job],
    args: argparse.Namespace,
    metrics_port: int | None = None,
    placed: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One side's run. ``placed`` is the devicePlugin side's TrainingJobs (name -> spec and status): that side
    fills it in; a floor side replays it."""
    namespace = NAMESPACES[side]
    box.kubectl("create", "namespace", namespace, check=False)
    ours = side != "kube-scheduler"
    manifest = training_jobs(trace, namespace) if ours else baseline_pods(trace, namespace)
    selector = LABEL_JOB if ours else BASELINE_LABEL
    expected = sum(j.workers for j in trace)
    stamper = Stamper(core, custom, namespace, selector, jobs_too=ours).start()
    time.sleep(1.0)  # the watches are open before anything is submitted
    before = scrape(metrics_port) if metrics_port else {}
    writes_before = api_writes(box)
    reads_before = api_requests(box, _READING)
    watched_before = watch_events(box)
    replayer = None
    if side in FLOOR_SIDES:
        specs = {item["metadata"]["name"]: item["spec"] for item in manifest["items"]}
        writes = {
            name: gang
            for name, job in (placed or {}).items()
            if (gang := gang_writes(side, namespace, name, specs[name], job["status"])) is not None
        }
        replayer = Replayer(str(box.kubeconfig), namespace, writes).start()
    cpu_before = cpu_seconds()
    _log(f"{side}: submitting {len(manifest['items'])} objects")
    wall0, t0 = time.time(), time.monotonic()
    box.kubectl("create", "-f", "-", input=json.dumps(manifest), timeout=600)
    submitted = time.monotonic() - t0
    why = settle(stamper.running, expected, t0, args.quiet, args.deadline)
    settled = time.monotonic() - t0
    time.sleep(0.5)
    stamper.stop()
    after = scrape(metrics_port) if metrics_port else {}
    writes = api_writes(box) - writes_before
    reads = api_requests(box, _READING) - reads_before
    watched = watch_events(box) - watched_before
    cpu = cpu_seconds() - cpu_before  # the floor client's too: read while it still runs
    if replayer is not None:
        replayer.stop()
    with stamper._lock:
        pods = dict(stamper.pods)
        jobs = dict(stamper.jobs)
    running_pods = sum(1 for p in pods.values() if p.running is not None)
    _log(f"{side}: {running_pods}/{expected} pods Running; settled after {settled:.1f} s ({why})")

    # the GPUs each pod really holds
    facts = read_cluster(core, custom)
    fallbacks = 0
    if side == "dra":
        held_on = dra_gpus(custom, core, namespace)
        reported = len(held_on)
    else:
        reported = wait_reported(custom, namespace, running_pods)
        facts = read_cluster(core, custom)
        pods_on: dict[str, list[tuple[str, int]]] = {}
        for job in trace:
            for pod in job.pods():
                stamps = pods.get(pod)
                if stamps is not None and stamps.running is not None:
                    pods_on.setdefault(stamps.node, []).append((pod, job.gpus_per_worker))
        held, fallbacks = device_plugin_gpus(namespace, pods_on, facts)
        held_on = {pod: (pods[pod].node, gpus) for pod, gpus in held.items()}

    statuses: dict[str, dict[str, Any]] = {}
    if ours:
        listed = custom.list_namespaced_custom_object("gputopo.io", "v1alpha1", namespace, "trainingjobs")
        statuses = {item["metadata"]["name"]: item.get("status") or {} for item in listed["items"]}
        if side == "devicePlugin" and placed is not None:
            placed.update({item["metadata"]["name"]: item for item in listed["items"]})
    waiting = why_waiting(core, namespace, selector, statuses)

    rows: dict[str, dict[str, Any]] = {}
    ranks = equal = 0
    for job in trace:
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
        "namespace": namespace,
        "objects_submitted": len(manifest["items"]),
        "submit_seconds": submitted,
        "settled_after_s": settled,
        "settled_because": why,
        "pods_expected": expected,
        "pods_running": running_pods,
        "jobs_running": len(up_rows),
        "partial_gangs": sum(1 for r in rows.values() if not r["running"] and r["pods_running"]),
        "time_per_job_s": _stats(times),
        "time_whole_trace_s": max(times) if times else None,
        "busbw_mean_gbps": statistics.fmean(b for b, _ in multi) if multi else None,
        "busbw_gpu_weighted_gbps": sum(b * g for b, g in multi) / sum(g for _, g in multi) if multi else None,
        "pods_with_real_gpus": reported,
        "pods_gpus_from_lowest_free_indices": fallbacks,
        "clock_check": clock_check(pods, jobs, wall0, t0),
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
        if (pod.get("spec") or {}).get("schedulingGates"):
            found["pod still gated"] += 1
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") != "True":
                found[f"pod {cond.get('reason')}: {str(cond.get('message', '')).split('.')[0][:120]}"] += 1
    for name, status in statuses.items():
        if status.get("phase") != "Running" and name not in with_pods:
            placed = next((c for c in status.get("conditions") or [] if c.get("type") == "Placed"), {})
            found[f"job {status.get('phase')}, Placed {placed.get('reason')}"] += 1
    return dict(found.most_common(10))


def stages(
    job: Job, pods: Mapping[str, PodStamps], stamps: JobStamps | None, t0: float, ours: bool
) -> dict[str, float]:
    """The stage times of one Running job, seconds (planning is split off later, from the metrics)."""
    gang = [pods[p] for p in job.pods()]
    created = max(p.created for p in gang)
    ungated = max(p.ungated if p.ungated is not None else p.created for p in gang)
    bound = max(p.bound for p in gang if p.bound is not None)
    running = max(p.running for p in gang if p.running is not None)
    if not ours or stamps is None or stamps.planned is None:
        return {"submit": created - t0, "binding": max(0.0, bound - ungated), "start": max(0.0, running - bound)}
    return {
        "submit": stamps.created - t0,
        "queue+planning": max(0.0, stamps.planned - stamps.created),
        "writes": max(0.0, created - stamps.planned),
        "ungating": max(0.0, ungated - created),
        "binding": max(0.0, bound - ungated),
        "start": max(0.0, running - bound),
    }


def stage_summary(rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, float] | None, ours: bool) -> dict[str, Any]:
    keys = (
        ("submit", "queue+planning", "writes", "ungating", "binding", "start")
        if ours
        else ("submit", "binding", "start")
    )
    out: dict[str, Any] = {k: _stats([r["stages"][k] for r in rows if k in r.get("stages", {})]) for k in keys}
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
        out["queue"] = _stats(queue)
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
        "bound_minus_PodScheduled_s": _stats(bound_lag) | {"min": min(bound_lag) if bound_lag else None},
        "job_seen_minus_creationTimestamp_s": _stats(created_lag) | {"min": min(created_lag) if created_lag else None},
    }


# -- the run -------------------------------------------------------------------------------------------------------


def clients(box: Sandbox) -> tuple[Any, Any]:
    api = k8s.ApiClient(load_configuration(str(box.kubeconfig)))
    return k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)


def operator_side(
    side: str, box: Sandbox, trace: Sequence[Job], args: argparse.Namespace, placed: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    core, custom = clients(box)
    port = free_port()
    box.kubectl("create", "namespace", NAMESPACES[side], check=False)  # the operator's ConfigMap goes there
    pid, loop_s, log_file, offset = start_operator(
        box, NAMESPACES[side], f"bench-allocation-{side}", {"GPUTOPO_METRICS_PORT": str(port)}
    )
    _log(f"{side}: operator pid {pid}, control loop up after {loop_s:.1f} s")
    try:
        result = run_side(side, box, core, custom, trace, args, metrics_port=port, placed=placed)
    finally:
        box.stop_operator()
    result["operator_log"] = log_problems(log_file, offset)
    result["control_loop_up_s"] = loop_s
    return result


def run(args: argparse.Namespace, trace: Sequence[Job]) -> dict[str, Any]:
    """Each side on a sandbox of its own, brought up for it: every side starts the same time after ``up``, so
    each meets the same background (kwok heartbeats all nodes of a sandbox together, tens of seconds after it
    starts; a side that met them would pay for thousands of Node writes the others did not)."""
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        raise SystemExit(f"unknown sides: {', '.join(unknown)} (known: {', '.join(SIDES)})")
    floors = [s for s in sides if s in FLOOR_SIDES]
    if floors and ("devicePlugin" not in sides or sides.index("devicePlugin") > sides.index(floors[0])):
        raise SystemExit(f"{', '.join(floors)} replay the devicePlugin side's placements: run devicePlugin before them")
    out: dict[str, Any] = {}
    placed: dict[str, dict[str, Any]] = {}
    for side in sides:
        dra = side == "dra"
        box = Sandbox(args.sandbox + ("-dra" if dra else ""))
        try:
            t = time.monotonic()
            if dra:
                box.up(nodes=args.nodes, profile="mixed", probes=True, wait=300, gpu_allocation="dra")
            else:
                box.up(nodes=args.nodes, profile="mixed", probes=True, wait=300, fake_allocation="device-plugin")
            out.setdefault("sandbox_up_s", {})[side] = time.monotonic() - t
            core, custom = clients(box)
            facts = read_cluster(core, custom)
            out["nodes"], out["gpus"] = len(facts.topologies), sum(t.gpu_count for t in facts.topologies.values())
            if side == "kube-scheduler":
                out[side] = run_side(side, box, core, custom, trace, args)
            elif side in FLOOR_SIDES:
                out[side] = run_side(side, box, core, custom, trace, args, placed=placed)
            else:
                out[side] = operator_side(side, box, trace, args, placed)
        finally:
            if not args.keep:
                box.down()
    return out


# -- the report ---------------------------------------------------------------------------------------------------


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    cfg, res = report["config"], report["results"]
    sides = [s for s in SIDES if s in res]
    kube = res.get("kube-scheduler")
    kube_p50 = kube["time_per_job_s"]["p50"] if kube else None

    def ratio(side: str) -> str:
        p50 = res[side]["time_per_job_s"]["p50"]
        return _f(p50 / kube_p50, ".2f") + " x" if kube_p50 and p50 is not None else "-"

    lines = [
        "# GPU allocation: time to Running, bus bandwidth, plan = reality",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}; run took {report['bench_wall_s']:.0f} s",
        "",
        f"{cfg['jobs']} jobs (trace of `bench_operator.py`, seed {cfg['seed']}: "
        f"{', '.join(f'{n} of {size}' for size, n in cfg['trace_sizes'].items())}; {cfg['demand_gpus']} GPUs) on "
        f"a {res.get('nodes')}-node `mixed` sandbox ({res.get('gpus')} GPUs). Each side gets the whole trace in "
        "one `kubectl create`; times count from the start of that call.",
        "",
        "| | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
        "| jobs with every pod Running | "
        + " | ".join(f"{res[s]['jobs_running']} of {cfg['jobs']}" for s in sides)
        + " |",
        "| per job to Running p50 / p90 / max (s) | "
        + " | ".join(
            f"{_f(res[s]['time_per_job_s']['p50'])} / {_f(res[s]['time_per_job_s']['p90'])} / "
            f"{_f(res[s]['time_per_job_s']['max'])}"
            for s in sides
        )
        + " |",
        "| p50 against kube-scheduler alone | " + " | ".join(ratio(s) for s in sides) + " |",
        "| whole trace Running (s) | " + " | ".join(_f(res[s]["time_whole_trace_s"]) for s in sides) + " |",
        "| est. bus bandwidth, mean of multi-GPU jobs (GB/s) | "
        + " | ".join(_f(res[s]["busbw_mean_gbps"]) for s in sides)
        + " |",
        "| est. bus bandwidth, GPU-weighted (GB/s) | "
        + " | ".join(_f(res[s]["busbw_gpu_weighted_gbps"]) for s in sides)
        + " |",
        "| ranks whose real GPUs equal the plan | "
        + " | ".join(
            "no plan"
            if s == "kube-scheduler"
            else f"{res[s]['ranks_as_planned']} of {res[s]['ranks_compared']} "
            f"({_f(100 * (res[s]['share_as_planned'] or 0))} %)"
            for s in sides
        )
        + " |",
        "| partly Running gangs | " + " | ".join(str(res[s]["partial_gangs"]) for s in sides) + " |",
        "",
        "Where the time goes, per job Running (seconds; p50 / mean — means add up to the mean time to Running):",
        "",
        "| stage | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    names = {
        "submit": "submit (kubectl create → object seen)",
        "queue": "queue wait (seen → plan, less the planner)",
        "planning": "planning (planner call, mean per decision)",
        "writes": "API writes (plan → last pod created)",
        "ungating": "ungating (→ last gate removed)",
        "binding": "binding (→ last pod bound)",
        "start": "start (→ last pod Running)",
    }
    for stage in STAGES:
        cells = []
        for s in sides:
            entry = res[s]["stages"].get(stage)
            if entry is None:
                cells.append("-")
            elif stage == "planning":
                cells.append(f"{entry['per_decision_mean_s'] * 1000:.1f} ms ({entry['decisions']:.0f} decisions)")
            else:
                cells.append(f"{_f(entry['p50'], '.2f')} / {_f(entry['mean'], '.2f')}")
        lines.append(f"| {names[stage]} | " + " | ".join(cells) + " |")
    lines.append(
        "| of the queue wait: a placed gang's wait for an API slot (mean) | "
        + " | ".join(
            f"{res[s]['stages']['slot_wait']['mean_s']:.2f}" if "slot_wait" in res[s]["stages"] else "-" for s in sides
        )
        + " |"
    )
    lines.append(
        "| control passes (count, total s) | "
        + " | ".join(
            f"{res[s]['stages']['passes']['count']:.0f}, {res[s]['stages']['passes']['total_s']:.1f}"
            if "passes" in res[s]["stages"]
            else "-"
            for s in sides
        )
        + " |"
    )
    lines.append(
        "| API server writes while settling (all clients) | "
        + " | ".join(f"{res[s]['api_writes_total']}" for s in sides)
        + " |"
    )
    checks = []
    for s in sides:
        c = res[s]["clock_check"]["bound_minus_PodScheduled_s"]
        checks.append(f"{s} {_f(c['min'], '.2f')} to {_f(c['max'], '.2f')} s")
    lines += [
        "",
        "Stage times are watch stamps (this process's monotonic clock at arrival), per job the last of its pods; "
        "the planner's own time is the operator's `gputopo_placement_decision_seconds` histogram. Watch stamp "
        "of binding minus the API server's whole-second `PodScheduled` time: " + "; ".join(checks) + ".",
        "",
        "Real GPUs: devicePlugin sides from the probes' PodResources report (NodePodGpus `status.pods`; "
        + ", ".join(f"{s}: {res[s]['pods_with_real_gpus']} pods reported" for s in sides if s != "dra")
        + "), dra from each rank's ResourceClaim allocation. Bus bandwidth is one estimator "
        "(`gputopo.topology.estimate_gang`) on those GPUs for every side; 1-GPU jobs stay out of the means.",
        "",
    ]
    counts = (
        (
            "api_writes",
            "API server writes by verb and resource (`apiserver_request_total`, from before the submission until "
            "the side settled; kube-scheduler's bindings, kwok's pod status updates and the probes' reports count "
            "too):",
        ),
        ("api_reads", "Reads, the same way:"),
        (
            "watch_events",
            "Watch events the API server sent, by resource (`apiserver_watch_events_total`; nodes and leases are "
            "the sandbox's background):",
        ),
    )
    for key, title in counts:
        lines += [title, ""]
        for s in sides:
            top = ", ".join(f"{k} {v}" for k, v in list((res[s].get(key) or {}).items())[:8])
            lines.append(f"- {s}: {top}")
        lines.append("")
    lines += [
        "CPU seconds per component from the submission until the side settled (`/proc/<pid>/stat`, user + "
        "system; the machine has "
        f"{os.cpu_count()} CPUs):",
        "",
    ]
    for s in sides:
        used = res[s].get("cpu_seconds") or {}
        total = sum(used.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in used.items())
        lines.append(f"- {s}: {total:.1f} in {res[s]['settled_after_s']:.1f} s — {parts}")
    lines.append("")
    for s in sides:
        r = res[s]
        extra = ""
        if s in FLOOR_SIDES:
            failed = r.get("replay_errors") or []
            extra = f"; job phases {r['phases']}; writes failed: {len(failed)}" + (f" ({failed[0]})" if failed else "")
        elif s != "kube-scheduler":
            extra = (
                f"; job phases {r['phases']}; {r['generations_above_1']} jobs re-planned; operator log "
                f"{r['operator_log']['error_lines']} error lines of {r['operator_log']['lines']}"
            )
        waits = "; ".join(f"{k}: {v}" for k, v in r.get("not_running", {}).items())
        extra += f"; not Running: {waits}" if waits else ""
        lines.append(f"- {s}: settled after {r['settled_after_s']:.1f} s ({r['settled_because']}){extra}.")
    lines += remaining(report)
    before = report.get("before")
    if before:
        lines += ["", *compare(before, report), ""]
    if report.get("plot"):
        lines += ["", f"![jobs Running over time; stage means]({report['plot']})"]
    return "\n".join(lines) + "\n"


def floor_lines(res: Mapping[str, Any], kube: Mapping[str, Any]) -> list[str]:
    """The floor sides against kube-scheduler alone and the operator: what the writes alone take here."""
    kube_p50 = kube["time_per_job_s"]["p50"]
    floors = [s for s in FLOOR_SIDES if s in res and res[s]["time_per_job_s"]["p50"] is not None]
    if not floors or not kube_p50:
        return []
    said = {
        "replay": "the operator's writes, write for write, by a client that decides nothing",
        "minimal": "one status write per job, Running with the placement, none before the pods",
        "pinned": "no status at all",
    }
    lines = ["The floor: the same placements written with no operator (`bench/floor.py`); p50 to Running:", ""]
    for s in floors:
        r = res[s]
        p50 = r["time_per_job_s"]["p50"]
        cpu = sum((r.get("cpu_seconds") or {}).values())
        lines.append(
            f"- {s} ({said[s]}): {p50:.2f} s, {p50 / kube_p50:.2f} x kube-scheduler alone; "
            f"{r['api_writes_total']} API writes, {cpu:.1f} CPU-s"
        )
    lines += [""]
    lines.append(
        "The floor client keeps no node turns (the operator lets a gang's pods out on a node only once the gang "
        "before has been bound there), so the device plugin's choice can differ from the plan on a node two gangs "
        "share."
    )
    return [*lines, ""]


def remaining(report: dict[str, Any]) -> list[str]:
    """Where gputopo's time goes beyond kube-scheduler alone's, from this run's figures."""
    res, jobs = report["results"], report["config"]["jobs"]
    kube = res.get("kube-scheduler")
    if kube is None:
        return []
    lines = ["", "What the gap to kube-scheduler alone is made of, per side (means per job Running):", ""]
    lines += floor_lines(res, kube)
    for side in ("devicePlugin", "dra"):
        r = res.get(side)
        if r is None:
            return lines
        st = r["stages"]
        mean = statistics.fmean(j["seconds"] for j in r["jobs"].values() if j["running"])
        kube_mean = statistics.fmean(j["seconds"] for j in kube["jobs"].values() if j["running"])
        planner = st["planning"]["per_decision_mean_s"] if "planning" in st else 0.0
        decisions = st["planning"]["decisions"] if "planning" in st else 0.0
        later = sum((st.get(k) or {}).get("mean") or 0.0 for k in ("writes", "ungating", "binding", "start"))
        slot = (st.get("slot_wait") or {}).get("mean_s")
        waited = f", of which {slot:.2f} s waiting for an API slot once planned" if slot is not None else ""
        lines.append(
            f"- {side}: {mean:.1f} s against {kube_mean:.1f} s. Queue wait {_f(st['queue']['mean'])} s{waited}: the "
            f"jobs ahead being planned one after another ({decisions:.0f} planner calls of {planner * 1000:.1f} ms, "
            f"{decisions * planner:.1f} s in all) and written, {_f(st['passes']['count'], '.0f')} control passes "
            f"taking {_f(st['passes']['total_s'])} s (the writes go out beside them); plan to Running {later:.2f} s. "
            "The API server "
            f"took {r['api_writes_total']} writes against {kube['api_writes_total']} for kube-scheduler alone "
            f"({(r['api_writes_total'] - kube['api_writes_total']) / jobs:.1f} more per job)."
        )
    return lines


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Per side, the figures of an earlier report (``--before``) next to this one's."""
    old, new = before["results"], after["results"]
    sides = [s for s in SIDES if s in old and s in new]
    lines = [
        f"## Before and after: `{before['command']}` against `{after['command']}`",
        "",
        f"Before: {before.get('code', 'an earlier tree')}. After: {after.get('code', 'this tree')}.",
        "",
        "| | " + " | ".join(f"{s} before | {s} after" for s in sides) + " |",
        "|---|" + "---|---|" * len(sides),
    ]

    def row(label: str, value: Any) -> str:
        return f"| {label} | " + " | ".join(f"{value(old[s])} | {value(new[s])}" for s in sides) + " |"

    def ratio(res: dict[str, Any], side: dict[str, Any]) -> str:
        kube = res.get("kube-scheduler", {}).get("time_per_job_s", {}).get("p50")
        p50 = side["time_per_job_s"]["p50"]
        return _f(p50 / kube, ".2f") if kube and p50 is not None else "-"

    lines.append(row("per job p50 (s)", lambda r: _f(r["time_per_job_s"]["p50"])))
    lines.append(row("whole trace (s)", lambda r: _f(r["time_whole_trace_s"])))
    lines.append(
        "| p50 ÷ kube-scheduler p50 of the same run | "
        + " | ".join(f"{ratio(old, old[s])} | {ratio(new, new[s])}" for s in sides)
        + " |"
    )
    for stage in ("submit", "queue", "writes", "ungating", "binding", "start"):
        lines.append(row(f"{stage}, mean (s)", lambda r, st=stage: _f((r["stages"].get(st) or {}).get("mean"), ".2f")))
    lines.append(
        row(
            "planner, mean per decision (ms)",
            lambda r: _f(1000 * r["stages"]["planning"]["per_decision_mean_s"]) if "planning" in r["stages"] else "-",
        )
    )
    lines.append(row("API server writes", lambda r: str(r.get("api_writes_total", "-"))))
    return lines


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    res = report["results"]
    sides = [s for s in SIDES if s in res]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for s in sides:
        times = sorted(r["seconds"] for r in res[s]["jobs"].values() if r["running"])
        axes[0].step([0.0, *times], list(range(len(times) + 1)), where="post", label=s)
    axes[0].set_xlabel("seconds since submission")
    axes[0].set_ylabel("jobs with every pod Running")
    axes[0].legend()
    bottom = [0.0] * len(sides)
    for stage in ("submit", "queue", "writes", "ungating", "binding", "start"):
        heights = [(res[s]["stages"].get(stage) or {}).get("mean") or 0.0 for s in sides]
        axes[1].bar(sides, heights, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes[1].set_ylabel("mean seconds per job to Running")
    axes[1].tick_params(axis="x", labelrotation=20)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="bench-allocation")
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quiet", type=float, default=15.0, help="settled: nothing new Running this long (s)")
    parser.add_argument("--deadline", type=float, default=300.0, help="longest wait of one side (s)")
    parser.add_argument("--sides", default=",".join(SIDES), help="which of " + ", ".join(SIDES))
    parser.add_argument("--out", default="allocation", help="report name under bench/reports/")
    parser.add_argument("--before", default=None, help="an earlier report's JSON, shown side by side")
    parser.add_argument("--keep", action="store_true", help="leave each side's sandbox up, to look into it after")
    parser.add_argument("--code", default=None, help="what code this run measures (a commit, say), for the report")
    args = parser.parse_args()

    trace = make_trace(args.jobs, args.seed)
    started = time.monotonic()
    results = run(args, trace)
    report: dict[str, Any] = {
        **report_head(["bench/bench_allocation.py", *sys.argv[1:]]),
        "config": {
            "jobs": args.jobs,
            "seed": args.seed,
            "nodes": args.nodes,
            **trace_config(trace),
            "quiet_s": args.quiet,
            "deadline_s": args.deadline,
            "goal_ratio_p50": GOAL_RATIO,
        },
        "results": results,
        "bench_wall_s": time.monotonic() - started,
    }
    if args.code:
        report["code"] = args.code
    if args.before:
        report["before"] = {
            k: v for k, v in json.loads(Path(args.before).read_text()).items() if k in ("command", "code", "results")
        }
    REPORTS.mkdir(exist_ok=True)
    if plot(report, REPORTS / f"{args.out}.png"):
        report["plot"] = f"{args.out}.png"
    (REPORTS / f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n")
    (REPORTS / f"{args.out}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
