"""The operator end to end on the sandbox: time to Running and bus bandwidth against plain kube-scheduler,
and the operator's resident memory at 1,000 nodes and 1,000 jobs.

Part 1, a 256-node ``mixed`` sandbox with fake probes. One trace of TrainingJobs of mixed sizes (fixed seed,
demand about the cluster's GPU capacity, so some must wait) is submitted twice, each time with one
``kubectl create`` of a List into a fresh namespace:

* kube-scheduler alone (operator stopped): every worker pod of every job, same ``nvidia.com/gpu`` request,
  no scheduling gates, no affinity;
* gputopo (operator running, control loop up): the TrainingJobs.

A pod watch stamps the moment each pod is first seen bound and Running. A job counts as Running when all its
workers are. A side is settled when every pod runs, or when nothing new started for ``--quiet`` seconds
(what does not run by then waits for capacity). Bus bandwidth: gputopo's own figure from each job's
``status.placement``; for the plain pods, the GPUs the fake device plugin gave each pod (NodePodGpus
``status.pods``; lowest free indices where a pod is not reported) through ``gputopo.topology.estimate_gang``
with the operator's tier oversubscription (1 in a leaf, 2 in a spine, 4 beyond). gputopo's placements are
scored again the same way, so both columns come from one estimator.

Part 2, a separate 1,000-node sandbox (probes every 5 s): the operator's VmRSS / VmHWM from /proc with the
nodes only, then with ``--mem-jobs`` TrainingJobs once the queue is steady (goal: ≤ 150 MB).

Writes bench/reports/operator.{json,md,png}.
Run: python bench/bench_operator.py [--jobs 200 --nodes 256 --mem-nodes 1000 --mem-jobs 1000 --seed 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from gputopo.api.group import GPU_RESOURCE, LABEL_JOB
from gputopo.api.nodepodgpus import NodePodGpusStatus, PodGpus
from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.kube.client import load_configuration
from gputopo.placement.types import DEFAULT_TIERS
from gputopo.sandbox import Sandbox
from gputopo.sandbox.harness import training_job
from gputopo.sandbox.processes import rss_mib
from gputopo.topology import Topology, estimate_gang, from_status
from watching import Watcher  # bench/watching.py: scripts here run with bench/ on sys.path

REPORTS = Path(__file__).parent / "reports"
NS_KUBE = "bench-op-kube"
NS_GPUTOPO = "bench-op-gputopo"
NS_MEMORY = "bench-op-memory"
BASELINE_LABEL = "bench.gputopo.io/job"
# (workers, gpusPerWorker): weight in the trace
SIZES: dict[tuple[int, int], int] = {(1, 1): 15, (1, 2): 15, (1, 4): 15, (1, 8): 25, (2, 8): 18, (4, 8): 12}
GOAL_RSS_MB = 150.0


def _log(message: str) -> None:
    print(f"[bench-operator] {message}", file=sys.stderr, flush=True)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


# -- the trace --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    workers: int
    gpus_per_worker: int

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def size(self) -> str:
        return f"{self.workers}x{self.gpus_per_worker}"

    def pods(self) -> list[str]:
        return [f"{self.name}-{rank}" for rank in range(self.workers)]


def make_trace(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    shapes = list(SIZES)
    picks = rng.choices(shapes, weights=[SIZES[s] for s in shapes], k=count)
    return [Job(f"job-{i:03d}", w, g) for i, (w, g) in enumerate(picks)]


def _container(gpus: int) -> dict[str, Any]:
    """The container of ``training_job``'s template, with the GPU limit the operator would give it."""
    return {"name": "trainer", "image": "pytorch", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}


def baseline_pods(jobs: Sequence[Job], namespace: str) -> dict[str, Any]:
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace, "labels": {BASELINE_LABEL: job.name}},
            "spec": {"restartPolicy": "Never", "containers": [_container(job.gpus_per_worker)]},
        }
        for job in jobs
        for pod in job.pods()
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def training_jobs(jobs: Sequence[Job], namespace: str) -> dict[str, Any]:
    items = [training_job(j.name, namespace, workers=j.workers, gpusPerWorker=j.gpus_per_worker) for j in jobs]
    return {"apiVersion": "v1", "kind": "List", "items": items}


# -- watching pods -----------------------------------------------------------------------------------------------


@dataclass
class PodClock:
    """When each pod of a namespace was first seen bound and Running: one list, then a watch from there."""

    core: Any
    namespace: str
    selector: str
    running_at: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watcher: Watcher | None = None

    def start(self) -> PodClock:
        call = self.core.list_namespaced_pod
        kwargs = {"label_selector": self.selector}
        self._watcher = Watcher(call, (self.namespace,), kwargs, self._observe, name="pod-clock").start()
        return self

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    def running(self) -> int:
        with self._lock:
            return len(self.running_at)

    def snapshot(self) -> tuple[dict[str, float], dict[str, str]]:
        with self._lock:
            return dict(self.running_at), dict(self.nodes)

    def _observe(self, pod: Any, now: float) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if meta is None or spec is None or status is None or meta.deletion_timestamp is not None:
            return
        if spec.node_name and status.phase == "Running":
            with self._lock:
                if meta.name not in self.running_at:
                    self.running_at[meta.name] = now
                    self.nodes[meta.name] = spec.node_name


def _placed_reason(job: dict[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Placed":
            return f"{cond.get('reason')} ({str(cond.get('message', ''))[:80]})"
    return "no Placed condition yet"


def settle(count: Callable[[], int], expected: int, t0: float, quiet: float, deadline: float) -> str:
    """Wait until ``expected`` pods run, or nothing new started for ``quiet`` s, or ``deadline`` s passed."""
    last, changed = -1, time.monotonic()
    while True:
        now = time.monotonic()
        n = count()
        if n != last:
            last, changed = n, now
        if n >= expected:
            return "all pods Running"
        if n > 0 and now - changed >= quiet:
            return f"nothing new Running for {quiet:.0f} s"
        if now - t0 >= deadline:
            return f"deadline of {deadline:.0f} s"
        time.sleep(0.25)


# -- the cluster as the estimator sees it -----------------------------------------------------------------------


@dataclass
class ClusterFacts:
    topologies: dict[str, Topology]
    labels: dict[str, dict[str, str]]
    reported: dict[tuple[str, str], list[int]]  # (namespace, pod) -> GPUs, from NodePodGpus status.pods
    reported_on: dict[str, list[tuple[str, str]]]  # node -> pods it reports


def read_cluster(core: Any, custom: Any) -> ClusterFacts:
    topologies: dict[str, Topology] = {}
    reported: dict[tuple[str, str], list[int]] = {}
    reported_on: dict[str, list[tuple[str, str]]] = {}
    listed = custom.list_cluster_custom_object("gputopo.io", "v1alpha1", "nodetopologies")
    for item in listed["items"]:
        status = NodeTopologyStatus.model_validate(item.get("status") or {})
        if status.gpus:
            topologies[item["metadata"]["name"]] = from_status(status)
    for name, entries in reported_pods(custom).items():
        for entry in entries:
            reported[(entry.namespace, entry.name)] = list(entry.gpus)
            reported_on.setdefault(name, []).append((entry.namespace, entry.name))
    labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in core.list_node().items}
    return ClusterFacts(topologies, labels, reported, reported_on)


def oversubscription(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]]) -> tuple[float, str]:
    """The operator's default tier factor for a gang spread over ``nodes``."""
    if len(set(nodes)) <= 1:
        return 1.0, "one node"
    for i, level in enumerate(DEFAULT_TIERS.levels):
        switches = {labels.get(n, {}).get(level.label) for n in nodes}
        if len(switches) == 1 and None not in switches:
            return level.oversubscription, f"tier {i}"
    return DEFAULT_TIERS.beyond_top, "beyond the top tier"


def gang_busbw(members: Mapping[str, Sequence[int]], facts: ClusterFacts) -> tuple[float, str, str]:
    nodes = sorted(members)
    factor, tier = oversubscription(nodes, facts.labels)
    estimate = estimate_gang([(facts.topologies[n], sorted(members[n])) for n in nodes], oversubscription=factor)
    return estimate.busbw_gbps, estimate.bottleneck, tier


def device_plugin_gpus(
    namespace: str, pods_on: Mapping[str, list[tuple[str, int]]], facts: ClusterFacts
) -> tuple[dict[str, list[int]], int]:
    """The GPUs each bound pod holds: the fake probe's report, else the lowest indices nobody holds."""
    held: dict[str, list[int]] = {}
    fallbacks = 0
    for node, pods in pods_on.items():
        topology = facts.topologies[node]
        used = {g for key in facts.reported_on.get(node, []) for g in facts.reported[key]}
        for pod, size in sorted(pods):
            gpus = facts.reported.get((namespace, pod))
            if gpus is None or len(gpus) != size:
                free = [g for g in range(topology.gpu_count) if g not in used]
                gpus = free[:size]
                fallbacks += 1
            used.update(gpus)
            held[pod] = gpus
    return held, fallbacks


# -- one side of part 1 -----------------------------------------------------------------------------------------


def reported_pods(custom: Any) -> dict[str, list[PodGpus]]:
    """Node -> the pods its probe reports holding GPUs (every NodePodGpus ``status.pods``)."""
    listed = custom.list_cluster_custom_object("gputopo.io", "v1alpha1", "nodepodgpus")
    return {
        item["metadata"]["name"]: NodePodGpusStatus.model_validate(item.get("status") or {}).pods
        for item in listed["items"]
    }


def reported_in(custom: Any, namespace: str) -> int:
    return sum(1 for entries in reported_pods(custom).values() for e in entries if e.namespace == namespace)


def wait_reported(custom: Any, namespace: str, pods: int, timeout: float = 30.0) -> int:
    """Let the probes publish which GPUs the pods got: wait until ``pods`` entries of ``namespace`` show."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = reported_in(custom, namespace)
        if seen >= pods:
            break
        time.sleep(1.0)
    return seen


def wait_no_pods(box: Sandbox, core: Any, custom: Any, namespace: str, timeout: float = 120.0) -> None:
    """Delete every pod of ``namespace`` and wait until neither the API nor any probe report shows one."""
    box.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = len(core.list_namespaced_pod(namespace).items)
        if left == 0 and reported_in(custom, namespace) == 0:
            return
        time.sleep(1.0)
    raise TimeoutError(f"pods of {namespace} still there after {timeout:.0f} s")


def run_side(
    side: str,
    box: Sandbox,
    core: Any,
    custom: Any,
    trace: Sequence[Job],
    args: argparse.Namespace,
    operator_pid: int | None = None,
) -> dict[str, Any]:
    namespace = NS_KUBE if side == "kube-scheduler" else NS_GPUTOPO
    selector = BASELINE_LABEL if side == "kube-scheduler" else LABEL_JOB
    manifest = baseline_pods(trace, namespace) if side == "kube-scheduler" else training_jobs(trace, namespace)
    expected = sum(j.workers for j in trace)
    clock = PodClock(core, namespace, selector).start()
    time.sleep(1.0)  # the watch is open before anything is submitted
    _log(f"{side}: submitting {len(manifest['items'])} objects")
    t0 = time.monotonic()
    box.kubectl("create", "-f", "-", input=json.dumps(manifest), timeout=600)
    submitted = time.monotonic() - t0
    why = settle(clock.running, expected, t0, args.quiet, args.deadline)
    settled = time.monotonic() - t0
    clock.stop()
    running_at, nodes = clock.snapshot()
    _log(f"{side}: {len(running_at)}/{expected} pods Running; settled after {settled:.1f} s ({why})")
    rss = rss_mib(operator_pid) if operator_pid else None

    statuses: dict[str, dict[str, Any]] = {}
    if side == "gputopo":
        listed = custom.list_namespaced_custom_object("gputopo.io", "v1alpha1", namespace, "trainingjobs")
        statuses = {item["metadata"]["name"]: item.get("status") or {} for item in listed["items"]}
    pods_on: dict[str, list[tuple[str, int]]] = {}
    for job in trace:
        for pod in job.pods():
            if pod in nodes:
                pods_on.setdefault(nodes[pod], []).append((pod, job.gpus_per_worker))
    reported = wait_reported(custom, namespace, len(running_at))
    facts = read_cluster(core, custom)
    held, fallbacks = device_plugin_gpus(namespace, pods_on, facts)

    rows: dict[str, dict[str, Any]] = {}
    mismatched = 0
    for job in trace:
        up = [p for p in job.pods() if p in running_at]
        row: dict[str, Any] = {"running": len(up) == job.workers, "pods_running": len(up)}
        if row["running"]:
            row["seconds"] = max(running_at[p] for p in up) - t0
            members: dict[str, list[int]] = {}
            for p in up:
                members.setdefault(nodes[p], []).extend(held[p])
            busbw, bottleneck, tier = gang_busbw(members, facts)
            row |= {"busbw_gbps": busbw, "bottleneck": bottleneck, "span": tier, "nodes": sorted(members)}
            row["gpu_models"] = sorted({facts.topologies[n].gpus[0].model for n in members})
        status = statuses.get(job.name)
        if status is not None:
            row["phase"] = status.get("phase")
            placement = status.get("placement") or {}
            if placement and row["running"]:
                row["operator_busbw_gbps"] = placement.get("estimatedBusBandwidthGBps")
                planned = {f"{job.name}-{w['rank']}": sorted(w["gpus"]) for w in placement.get("workers") or []}
                mismatched += sum(1 for p, gpus in planned.items() if p in held and sorted(held[p]) != gpus)
        rows[job.name] = row
    times = [r["seconds"] for r in rows.values() if r["running"]]
    result: dict[str, Any] = {
        "namespace": namespace,
        "objects_submitted": len(manifest["items"]),
        "submit_seconds": submitted,
        "settled_after_s": settled,
        "settled_because": why,
        "pods_expected": expected,
        "pods_running": len(running_at),
        "gpus_in_use": sum(size for pods in pods_on.values() for _, size in pods),
        "jobs_running": sum(1 for r in rows.values() if r["running"]),
        "partial_gangs": sum(1 for r in rows.values() if not r["running"] and r["pods_running"]),
        "gpus_idle_in_partial_gangs": sum(
            r["pods_running"] * j.gpus_per_worker for j in trace if not (r := rows[j.name])["running"]
        ),
        "last_job_running_s": max(times) if times else None,
        "first_pod_running_s": min(running_at.values()) - t0 if running_at else None,
        "pods_reported_by_probes": reported,
        "pods_gpus_from_lowest_free_indices": fallbacks,
        "jobs": rows,
    }
    if side == "gputopo":
        result["phases"] = dict(Counter(str(s.get("phase")) for s in statuses.values()))
        result["planned_gpus_differing_from_probe_report"] = mismatched
        if rss is not None:
            result["operator_rss_mib"], result["operator_hwm_mib"] = rss
    return result


def wait_control_loop(log_file: Path, offset: int, timeout: float = 180.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with log_file.open("rb") as f:
                f.seek(offset)
                if b"control loop started" in f.read():
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"the operator's control loop did not start within {timeout:.0f} s; see {log_file}")


def start_operator(
    box: Sandbox, namespace: str, identity: str, settings: Mapping[str, str] | None = None
) -> tuple[int, float, Path, int]:
    """The operator over all namespaces, as the chart runs it; (pid, seconds to its loop, log, log offset).
    ``settings``: more ``GPUTOPO_*`` variables (a metrics port, say)."""
    log_file = box.log_dir / "operator.log"
    offset = log_file.stat().st_size if log_file.exists() else 0
    box.start_operator(
        {
            "GPUTOPO_OPERATOR_NAMESPACE": namespace,
            "GPUTOPO_IDENTITY": identity,
            "GPUTOPO_METRICS_PORT": "0",
            "GPUTOPO_LIVENESS_PORT": "0",
            "GPUTOPO_LOG_FORMAT": "plain",
            **(settings or {}),
        }
    )
    pid = int((box.dir / "pids" / "operator.pid").read_text().strip())
    return pid, wait_control_loop(log_file, offset), log_file, offset


def log_problems(log_file: Path, offset: int) -> dict[str, Any]:
    with log_file.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    bad = [line for line in lines if "Traceback" in line or " ERROR " in line or "[ERROR" in line]
    return {"lines": len(lines), "error_lines": len(bad), "first_errors": bad[:5]}


def part_speed(args: argparse.Namespace, trace: Sequence[Job]) -> dict[str, Any]:
    box = Sandbox(args.sandbox)
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.nodes, profile="mixed", probes=True, operator=False, wait=300)
        up_s = time.monotonic() - t0
        api = k8s.ApiClient(load_configuration(str(box.kubeconfig)))
        core: Any = k8s.CoreV1Api(api)
        custom: Any = k8s.CustomObjectsApi(api)
        capacity = read_cluster(core, custom)
        gpus = sum(t.gpu_count for t in capacity.topologies.values())
        for ns in (NS_KUBE, NS_GPUTOPO):
            box.kubectl("create", "namespace", ns, check=False)

        kube = run_side("kube-scheduler", box, core, custom, trace, args)
        wait_no_pods(box, core, custom, NS_KUBE)

        pid, loop_s, log_file, offset = start_operator(box, NS_GPUTOPO, "bench-operator")
        _log(f"operator pid {pid}: control loop up after {loop_s:.1f} s")
        try:
            ours = run_side("gputopo", box, core, custom, trace, args, operator_pid=pid)
        finally:
            box.stop_operator()
        ours["operator_log"] = log_problems(log_file, offset)
        ours["control_loop_up_s"] = loop_s
        return {
            "nodes": len(status.nodes),
            "profile": "mixed",
            "gpus": gpus,
            "node_types": dict(Counter(n.rsplit("-", 1)[0] for n in status.nodes)),
            "sandbox_up_s": up_s,
            "kube-scheduler": kube,
            "gputopo": ours,
        }
    finally:
        box.down()


# -- part 2: memory ---------------------------------------------------------------------------------------------


def part_memory(args: argparse.Namespace) -> dict[str, Any]:
    box = Sandbox(args.sandbox + "-1k")
    samples: list[tuple[float, float, str]] = []
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.mem_nodes, profile="mixed", probes=True, operator=False, probe_interval=5, wait=600)
        up_s = time.monotonic() - t0
        api = k8s.ApiClient(load_configuration(str(box.kubeconfig)))
        core: Any = k8s.CoreV1Api(api)
        custom: Any = k8s.CustomObjectsApi(api)
        box.kubectl("create", "namespace", NS_MEMORY, check=False)
        pid, loop_s, log_file, offset = start_operator(box, NS_MEMORY, "bench-operator-memory")
        _log(f"operator pid {pid} on {len(status.nodes)} nodes: control loop up after {loop_s:.1f} s")
        start = time.monotonic()
        stop = threading.Event()
        stage = ["nodes only"]

        def sample() -> None:
            while not stop.is_set():
                try:
                    rss, _ = rss_mib(pid)
                except (OSError, KeyError):
                    return
                samples.append((time.monotonic() - start, rss, stage[0]))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, name="rss", daemon=True)
        sampler.start()
        try:
            time.sleep(args.idle)
            idle_rss, idle_hwm = rss_mib(pid)
            jobs = [Job(f"mem-{i:04d}", args.mem_workers, args.mem_gpus) for i in range(args.mem_jobs)]
            clock = PodClock(core, NS_MEMORY, LABEL_JOB).start()
            stage[0] = "jobs submitted"
            t_submit = time.monotonic()
            box.kubectl("create", "-f", "-", input=json.dumps(training_jobs(jobs, NS_MEMORY)), timeout=600)
            submit_s = time.monotonic() - t_submit
            # The deadline counts from the end of the submission: creating 1,000 objects can take minutes.
            why = settle(
                clock.running, sum(j.workers for j in jobs), time.monotonic(), args.mem_quiet, args.mem_deadline
            )
            steady_after = time.monotonic() - t_submit
            clock.stop()
            stage[0] = "steady"
            listed: dict[str, Any] = custom.list_namespaced_custom_object(
                "gputopo.io", "v1alpha1", NS_MEMORY, "trainingjobs"
            )
            phases = Counter(str((item.get("status") or {}).get("phase")) for item in listed["items"])
            # Why the jobs that are not Running are where they are: the reason of their Placed condition.
            reasons = Counter(
                f"{(item.get('status') or {}).get('phase')}: {_placed_reason(item)}"
                for item in listed["items"]
                if (item.get("status") or {}).get("phase") != "Running"
            )
            restarted = sum(1 for item in listed["items"] if int((item.get("status") or {}).get("restarts") or 0) > 0)
            steady: list[float] = []
            for _ in range(int(args.steady_samples)):
                steady.append(rss_mib(pid)[0])
                time.sleep(1.0)
            rss, hwm = rss_mib(pid)
        finally:
            stop.set()
            box.stop_operator()
        problems = log_problems(log_file, offset)
        return {
            "nodes": len(status.nodes),
            "profile": "mixed",
            "probe_interval_s": 5,
            "sandbox_up_s": up_s,
            "control_loop_up_s": loop_s,
            "jobs": args.mem_jobs,
            "job_shape": f"{args.mem_workers}x{args.mem_gpus}",
            "submit_seconds": submit_s,
            "steady_after_s": steady_after,
            "steady_because": why,
            "pods_running": clock.running(),
            "phases": dict(phases),
            "not_running_reasons": dict(reasons.most_common(8)),
            "jobs_restarted": restarted,
            "idle_rss_mib": idle_rss,
            "idle_hwm_mib": idle_hwm,
            "steady_rss_mib": rss,
            "steady_rss_mib_max_of_samples": max(steady) if steady else rss,
            "hwm_mib": hwm,
            "goal_mb": GOAL_RSS_MB,
            "series": [{"t": round(t, 1), "rss_mib": round(r, 1), "stage": s} for t, r, s in samples],
            "operator_log": problems,
        }
    finally:
        box.down()


# -- the report -------------------------------------------------------------------------------------------------


def summarise(speed: dict[str, Any], trace: Sequence[Job]) -> dict[str, Any]:
    kube, ours = speed["kube-scheduler"], speed["gputopo"]
    both = [j for j in trace if kube["jobs"][j.name]["running"] and ours["jobs"][j.name]["running"]]
    # One GPU does no all-reduce: its "bus bandwidth" says nothing, so 1-GPU jobs stay out of the averages.
    multi = [j for j in both if j.gpus > 1]

    def side(s: dict[str, Any]) -> dict[str, Any]:
        up = [j for j in trace if s["jobs"][j.name]["running"]]
        times = [s["jobs"][j.name]["seconds"] for j in up]
        up_multi = [j for j in up if j.gpus > 1]
        bw = [s["jobs"][j.name]["busbw_gbps"] for j in up_multi]
        common_t = [s["jobs"][j.name]["seconds"] for j in both]
        common_bw = [s["jobs"][j.name]["busbw_gbps"] for j in multi]
        return {
            "jobs_running": len(up),
            "gpus_in_running_jobs": sum(j.gpus for j in up),
            "all_that_run_running_s": max(times) if times else None,
            "common_jobs_all_running_s": max(common_t) if common_t else None,
            "per_job_s_p50": _median(times),
            "per_job_s_p90": _pct(times, 0.9) if times else None,
            "common_per_job_s_p50": _median(common_t),
            "busbw_mean_gbps": _mean(bw),
            "busbw_gpu_weighted_gbps": (
                sum(b * j.gpus for b, j in zip(bw, up_multi, strict=True)) / sum(j.gpus for j in up_multi)
            )
            if up_multi
            else None,
            "common_busbw_mean_gbps": _mean(common_bw),
        }

    a, b = side(ours), side(kube)
    paired_t = [
        ours["jobs"][j.name]["seconds"] / kube["jobs"][j.name]["seconds"]
        for j in both
        if kube["jobs"][j.name]["seconds"] > 0
    ]
    paired_bw = [
        ours["jobs"][j.name]["busbw_gbps"] / kube["jobs"][j.name]["busbw_gbps"]
        for j in multi
        if kube["jobs"][j.name]["busbw_gbps"] > 0
    ]
    by_size: dict[str, dict[str, Any]] = {}
    for shape in SIZES:
        jobs = [j for j in trace if (j.workers, j.gpus_per_worker) == shape]
        key = f"{shape[0]}x{shape[1]}"
        entry: dict[str, Any] = {"jobs": len(jobs)}
        for name, s in (("gputopo", ours), ("kube", kube)):
            up = [s["jobs"][j.name] for j in jobs if s["jobs"][j.name]["running"]]
            entry[f"{name}_running"] = len(up)
            entry[f"{name}_s_p50"] = _median([r["seconds"] for r in up])
            entry[f"{name}_busbw_p50"] = _median([r["busbw_gbps"] for r in up])
        common = [j for j in jobs if j in both]
        entry["common"] = len(common)
        # ratio of the means over the jobs Running on both sides (a mean of ratios is ruled by tiny divisors)
        mean_ours = _mean([ours["jobs"][j.name]["busbw_gbps"] for j in common])
        mean_kube = _mean([kube["jobs"][j.name]["busbw_gbps"] for j in common])
        entry["busbw_ratio_common_mean"] = (
            mean_ours / mean_kube if mean_ours is not None and mean_kube and shape[0] * shape[1] > 1 else None
        )
        by_size[key] = entry
    deltas = [
        abs(r["busbw_gbps"] - r["operator_busbw_gbps"])
        for r in ours["jobs"].values()
        if r["running"] and r.get("operator_busbw_gbps") is not None
    ]

    def ratio(x: float | None, y: float | None) -> float | None:
        return x / y if x is not None and y else None

    return {
        "gputopo": a,
        "kube-scheduler": b,
        "jobs_running_on_both": len(both),
        "multi_gpu_jobs_running_on_both": len(multi),
        "ratio_time_all_that_run": ratio(a["all_that_run_running_s"], b["all_that_run_running_s"]),
        "ratio_time_common_jobs": ratio(a["common_jobs_all_running_s"], b["common_jobs_all_running_s"]),
        "ratio_time_per_job_p50": _median(paired_t),
        "ratio_busbw_common_mean": ratio(a["common_busbw_mean_gbps"], b["common_busbw_mean_gbps"]),
        "ratio_busbw_per_job_p50": _median(paired_bw),
        "by_size": by_size,
        "operator_vs_recomputed_busbw_max_abs_gbps": max(deltas) if deltas else None,
    }


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    speed, memory, summary = report["speed"], report.get("memory"), report["summary"]
    fig, axes = plt.subplots(1, 3 if memory else 2, figsize=(16 if memory else 11, 4.2))
    ax = axes[0]
    for name, colour in (("gputopo", "tab:blue"), ("kube-scheduler", "tab:orange")):
        times = sorted(r["seconds"] for r in speed[name]["jobs"].values() if r["running"])
        ax.step([0.0, *times], list(range(len(times) + 1)), where="post", label=name, color=colour)
    ax.set_xlabel("seconds since submission")
    ax.set_ylabel("jobs with every pod Running")
    ax.set_title(f"{report['config']['jobs']} jobs, {speed['nodes']} nodes")
    ax.legend()
    ax = axes[1]
    sizes = list(summary["by_size"])
    xs = range(len(sizes))
    g = [summary["by_size"][s]["gputopo_busbw_p50"] or 0 for s in sizes]
    k = [summary["by_size"][s]["kube_busbw_p50"] or 0 for s in sizes]
    ax.bar([x - 0.2 for x in xs], g, 0.4, label="gputopo", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], k, 0.4, label="kube-scheduler", color="tab:orange")
    ax.set_xticks(list(xs), sizes)
    ax.set_xlabel("workers x GPUs per worker")
    ax.set_ylabel("median estimated bus bandwidth (GB/s)")
    ax.legend()
    if memory:
        ax = axes[2]
        series = memory["series"]
        ax.plot([p["t"] for p in series], [p["rss_mib"] for p in series], color="tab:green")
        ax.axhline(GOAL_RSS_MB / 1.048576, color="tab:red", linestyle="--", label="150 MB goal")
        ax.set_xlabel("seconds since the control loop started")
        ax.set_ylabel("operator VmRSS (MiB)")
        ax.set_title(f"{memory['nodes']} nodes, {memory['jobs']} jobs")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(report: dict[str, Any]) -> str:
    cfg, speed, s = report["config"], report["speed"], report["summary"]
    kube, ours = speed["kube-scheduler"], speed["gputopo"]
    g, k = s["gputopo"], s["kube-scheduler"]
    demand = cfg["demand_gpus"]
    lines = [
        "# Operator: time to Running, bus bandwidth, memory",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}",
        "",
        f"## {cfg['jobs']} TrainingJobs on a {speed['nodes']}-node `mixed` sandbox",
        "",
        f"Trace (seed {cfg['seed']}): {', '.join(f'{n} of {size}' for size, n in cfg['trace_sizes'].items())} "
        f"(workers x GPUs per worker) — {demand} GPUs asked of {speed['gpus']} "
        f"({demand / speed['gpus']:.0%} of capacity; {speed['nodes'] - speed['node_types'].get('l40s-pcie', 0)} "
        "nodes have 8 GPUs, the L40S nodes 4). Each side gets the whole trace in one `kubectl create` of a List "
        "into a fresh namespace; times are from the start of that call.",
        "",
        "| | gputopo | kube-scheduler alone | ratio |",
        "|---|---|---|---|",
        f"| objects submitted (submit time) | {ours['objects_submitted']} TrainingJobs "
        f"({ours['submit_seconds']:.1f} s) "
        f"| {kube['objects_submitted']} pods ({kube['submit_seconds']:.1f} s) | |",
        f"| jobs with every pod Running | {g['jobs_running']} | {k['jobs_running']} | |",
        f"| GPUs in those jobs | {g['gpus_in_running_jobs']} | {k['gpus_in_running_jobs']} | |",
        f"| gangs partly Running (GPUs held idle) | {ours['partial_gangs']} ({ours['gpus_idle_in_partial_gangs']}) "
        f"| {kube['partial_gangs']} ({kube['gpus_idle_in_partial_gangs']}) | |",
        f"| time until every job that runs is Running (s) | {_f(g['all_that_run_running_s'])} "
        f"| {_f(k['all_that_run_running_s'])} | {_f(s['ratio_time_all_that_run'], '.2f')} |",
        f"| time until the {s['jobs_running_on_both']} jobs Running on both sides are Running (s) "
        f"| {_f(g['common_jobs_all_running_s'])} | {_f(k['common_jobs_all_running_s'])} "
        f"| {_f(s['ratio_time_common_jobs'], '.2f')} |",
        f"| per job, submission → all pods Running, p50 / p90 (s) | {_f(g['per_job_s_p50'])} / "
        f"{_f(g['per_job_s_p90'])} | {_f(k['per_job_s_p50'])} / {_f(k['per_job_s_p90'])} "
        f"| {_f(s['ratio_time_per_job_p50'], '.2f')} (p50 of per-job ratios) |",
        f"| est. bus bandwidth, mean over multi-GPU jobs Running (GB/s) | {_f(g['busbw_mean_gbps'])} "
        f"| {_f(k['busbw_mean_gbps'])} | |",
        f"| est. bus bandwidth, GPU-weighted mean (GB/s) | {_f(g['busbw_gpu_weighted_gbps'])} "
        f"| {_f(k['busbw_gpu_weighted_gbps'])} | |",
        f"| est. bus bandwidth, mean over the {s['multi_gpu_jobs_running_on_both']} multi-GPU jobs Running on "
        f"both (GB/s) | {_f(g['common_busbw_mean_gbps'])} "
        f"| {_f(k['common_busbw_mean_gbps'])} | {_f(s['ratio_busbw_common_mean'], '.2f')} "
        f"(per-job p50 {_f(s['ratio_busbw_per_job_p50'], '.2f')}) |",
        "",
        "By job size (jobs Running on each side; medians):",
        "",
        "| size | jobs | Running gputopo / kube | time p50 gputopo / kube (s) | busbw p50 gputopo / kube (GB/s) "
        "| busbw ratio of means, jobs on both |",
        "|---|---|---|---|---|---|",
    ]
    for size, e in s["by_size"].items():
        lines.append(
            f"| {size} | {e['jobs']} | {e['gputopo_running']} / {e['kube_running']} | {_f(e['gputopo_s_p50'])} / "
            f"{_f(e['kube_s_p50'])} | {_f(e['gputopo_busbw_p50'])} / {_f(e['kube_busbw_p50'])} "
            f"| {_f(e['busbw_ratio_common_mean'], '.2f')} ({e['common']}) |"
        )
    lines += [
        "",
        "How it was measured. A pod watch stamps when each pod is first seen bound and Running (kwok marks a bound "
        "pod Running at once; there are no containers). A job is Running when all its workers are. Demand is "
        "about the capacity, so not everything can run at once; each side is settled when all pods run or "
        f"nothing new started for {cfg['quiet_s']:.0f} s (gputopo: {ours['settled_because']}; kube-scheduler: "
        f"{kube['settled_because']}). The first ratio compares the time until everything that fits on each side "
        "is Running (the sides fit different sets of jobs); the second compares the same jobs, the ones Running "
        "on both sides. Ratios are gputopo ÷ kube-scheduler: below 1 is faster, above 1 is more bandwidth. "
        "Bus bandwidth averages leave out 1-GPU jobs (no all-reduce; the estimator's figure for one GPU is "
        "only shown in the 1x1 row).",
        "",
        "kube-scheduler alone gets one pod per worker with the same `nvidia.com/gpu` limit and nothing else. "
        "Without gang scheduling a multi-node job can start some of its workers and wait for the rest while "
        "they hold GPUs (the partial gangs above). Its GPUs per pod are the fake device plugin's best-effort "
        f"choice as the probes report it ({kube['pods_reported_by_probes']} of {kube['pods_running']} pods "
        f"reported; {kube['pods_gpus_from_lowest_free_indices']} took the lowest free indices instead). "
        "Both columns of bus bandwidth are `gputopo.topology.estimate_gang` on the nodes and GPUs the pods "
        "hold, the network part divided by the operator's default tier oversubscription (1 under one leaf, 2 "
        "under one spine, 4 beyond); for gputopo the figure the operator wrote into "
        "`status.placement.estimatedBusBandwidthGBps` differs from this by at most "
        f"{_f(s['operator_vs_recomputed_busbw_max_abs_gbps'], '.2f')} GB/s, and "
        f"{ours['planned_gpus_differing_from_probe_report']} planned GPU sets differ from what the probes "
        "report the pods got.",
        "",
        f"Operator in part 1: control loop up {ours['control_loop_up_s']:.1f} s after start; VmRSS "
        f"{_f(ours.get('operator_rss_mib'))} MiB (peak {_f(ours.get('operator_hwm_mib'))} MiB) when settled; "
        f"job phases {ours['phases']}; log: {ours['operator_log']['error_lines']} error lines of "
        f"{ours['operator_log']['lines']}. Sandbox up in {speed['sandbox_up_s']:.0f} s.",
        "",
    ]
    memory = report.get("memory")
    if memory:
        mb = memory["steady_rss_mib"] * 1.048576
        steady = not str(memory["steady_because"]).startswith("deadline")
        when = "queue steady" if steady else "at the deadline (queue not yet steady)"
        lines += [
            f"## Operator memory: {memory['nodes']} nodes, {memory['jobs']} TrainingJobs",
            "",
            f"A separate {memory['nodes']}-node `mixed` sandbox, fake probes every {memory['probe_interval_s']} s, "
            f"the operator watching all namespaces; {memory['jobs']} jobs of {memory['job_shape']} GPUs submitted "
            f"at once ({memory['submit_seconds']:.1f} s to submit), read {memory['steady_after_s']:.0f} s after "
            f"submission began ({memory['steady_because']}, counted from the end of the submission) with "
            f"{memory['pods_running']} pods Running, job phases {memory['phases']}; "
            f"{memory.get('jobs_restarted', 0)} jobs restarted at least once; control loop up "
            f"{memory['control_loop_up_s']:.1f} s after the operator started.",
            "",
            "Jobs not Running, by phase and the reason of their `Placed` condition: "
            + (
                "; ".join(f"{k}: {v} jobs" for k, v in memory.get("not_running_reasons", {}).items())
                if memory.get("not_running_reasons")
                else "none"
            )
            + ".",
            "",
            "| operator process | VmRSS (MiB) | VmHWM (MiB) |",
            "|---|---|---|",
            f"| nodes only, {cfg['idle_s']:.0f} s after the control loop started | {memory['idle_rss_mib']:.1f} "
            f"| {memory['idle_hwm_mib']:.1f} |",
            f"| {memory['jobs']} jobs submitted, {when} | {memory['steady_rss_mib']:.1f} (max of "
            f"{cfg['steady_samples']} samples {memory['steady_rss_mib_max_of_samples']:.1f}) "
            f"| {memory['hwm_mib']:.1f} |",
            "",
            f"VmRSS {mb:.0f} MB at the last reading against the goal of ≤ {GOAL_RSS_MB:.0f} MB: "
            f"{'met' if mb <= GOAL_RSS_MB else 'not met'}; peak {memory['hwm_mib'] * 1.048576:.0f} MB. "
            f"Operator log: {memory['operator_log']['error_lines']} error lines of {memory['operator_log']['lines']}.",
            "",
        ]
    if report.get("plot"):
        lines += [f"![jobs Running over time, bus bandwidth by size, operator memory]({report['plot']})", ""]
    return "\n".join(lines)


def write_report(name: str, report: Mapping[str, Any], text: str) -> None:
    """``bench/reports/<name>.json`` and ``.md``, and the Markdown on stdout."""
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (REPORTS / f"{name}.md").write_text(text)
    print(text)


def report_head(argv: Sequence[str]) -> dict[str, str]:
    """The command that made a report and the machine it ran on, as every report opens."""
    return {
        "command": "python " + " ".join(argv),
        "machine": f"{os.cpu_count()} CPUs (shared), Python {sys.version.split()[0]}",
    }


def trace_config(trace: Sequence[Job]) -> dict[str, Any]:
    """How many jobs of each size the trace has, and the GPUs they ask for."""
    sizes = Counter((j.workers, j.gpus_per_worker) for j in trace)
    return {
        "trace_sizes": {f"{w}x{g}": n for (w, g), n in sorted(sizes.items())},
        "demand_gpus": sum(j.gpus for j in trace),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="bench-operator")
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quiet", type=float, default=15.0, help="settled: nothing new Running this long (s)")
    parser.add_argument("--deadline", type=float, default=300.0, help="longest wait of one side (s)")
    parser.add_argument("--mem-nodes", type=int, default=1000)
    parser.add_argument("--mem-jobs", type=int, default=1000)
    parser.add_argument("--mem-workers", type=int, default=2)
    parser.add_argument("--mem-gpus", type=int, default=8)
    parser.add_argument("--mem-quiet", type=float, default=20.0)
    parser.add_argument("--mem-deadline", type=float, default=420.0)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds before reading the nodes-only RSS")
    parser.add_argument("--steady-samples", type=int, default=10)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()

    trace = make_trace(args.jobs, args.seed)
    started = time.monotonic()
    speed = part_speed(args, trace)
    report: dict[str, Any] = {
        **report_head(["bench/bench_operator.py", *sys.argv[1:]]),
        "config": {
            "jobs": args.jobs,
            "seed": args.seed,
            **trace_config(trace),
            "quiet_s": args.quiet,
            "deadline_s": args.deadline,
            "idle_s": args.idle,
            "steady_samples": args.steady_samples,
        },
        "trace": [{"name": j.name, "workers": j.workers, "gpusPerWorker": j.gpus_per_worker} for j in trace],
        "speed": speed,
        "summary": summarise(speed, trace),
    }
    if not args.skip_memory:
        report["memory"] = part_memory(args)
    report["bench_wall_s"] = time.monotonic() - started
    REPORTS.mkdir(exist_ok=True)
    if plot(report, REPORTS / "operator.png"):
        report["plot"] = "operator.png"
    write_report("operator", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
