"""Gangs on the sandbox three ways: kube-scheduler's own gang scheduling of PodGroups, gputopo placing the same
PodGroups, and gputopo's own TrainingJobs; time to Running, makespan, bus bandwidth, GPUs idle in partial gangs.

One 256-node ``mixed`` sandbox (Kubernetes 1.37 with the Workload API, fake probes), ``bench_operator.py``'s
trace of 200 jobs (fixed seed, demand about the cluster's GPU capacity, so some wait), each way submitted with
one ``kubectl create`` into a namespace of its own:

* ``kube-scheduler gang``: per job a PodGroup (``spec.schedulingPolicy.gang.minCount`` = its pods) and its
  pods naming it; no gate, no operator: kube-scheduler's GangScheduling plugin binds each group all or nothing,
  and the nodes' ``nvidia.com/gpu`` is all it counts;
* ``gputopo PodGroup``: the same PodGroups and pods, each pod carrying gputopo's gate ``gputopo.io/placement``
  as the chart's admission policy would add it; the operator plans each gang, pins its pods and lifts the gate;
* ``floor: minimal`` and ``floor: pinned`` (``podgroup_floor.py``): the same gated PodGroups and pods with no
  operator; a client that decides nothing steers each gang with the operator's own patches, to the nodes and GPUs
  the operator planned in the PodGroup way (``minimal`` also writes each gang's GangPlacement once it runs,
  ``pinned`` no record): what the steering writes alone take here, the floor under any placer that steers
  kube-scheduler through the API;
* ``gputopo TrainingJob``: the trace as TrainingJobs, what ``bench_operator.py`` measures.

The pods are bare pods of hand-made PodGroups, not Indexed Jobs: the sandbox's kwok completes a Job's pods as
soon as they run, and the trace's pods hold their GPUs until the way settles (the trace has no durations).
Per job: the seconds from submission until every pod is seen Running; bus bandwidth through gputopo's estimator
on the GPUs each pod got (the fake probes' NodePodGpus report), mean over multi-GPU jobs; GPUs idle in partial
gangs: GPUs of pods bound while their gang is not all Running, integrated over the way's run (GPU-seconds).

Writes bench/reports/gangs.{json,md,png}.
Run: python bench/bench_gangs.py [--jobs 200 --nodes 256 --seed 7 --api-concurrency N --ways kube,podgroup,...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from floor import Replayer
from gang_trace import BASELINE_LABEL, make_trace, manifest
from gangs_report import FLOORS, KUBE, PODGROUP, TRAININGJOB, WAYS, markdown, plot, summarise
from gputopo.sandbox import Sandbox
from podgroup_floor import steer_writes
from podgroup_run import PODGROUPS, Way, gang_placement_busbw, podgroup_gangs, run_way, trainingjob_busbw
from real_gpus import read_cluster, reported_in
from reporting import report_head, write_plotted_report
from sandbox_run import TraceRun, add_run_arguments, logger, operator_running, run_config, wait_no_pods

log = logger("bench-gangs")

NAMESPACES = {
    KUBE: "bench-gang-kube",
    PODGROUP: "bench-gang-podgroup",
    **{way: f"bench-gang-floor-{FLOORS[way]}" for way in FLOORS},
    TRAININGJOB: "bench-gang-trainingjob",
}

NOTES = [
    "Time to Running: from submission, seconds from the start of the way's one `kubectl create` (which itself "
    "takes seconds for the whole trace) until every pod of the job is seen Running on a watch; the goal is "
    "judged on it. From creation: from the job's first sight on the watch (its first pod; a TrainingJob itself); "
    "a watch that lags sees a pod first when it already runs, so this understates a fast way's time (kube-"
    "scheduler's reads about 0). Makespan: the last job's, from submission. Pods never finish (the trace has no "
    "durations; the sandbox's kwok would complete a Job's pods at once, so the gangs are bare pods of hand-made "
    "PodGroups): jobs that do not fit wait, and a way is settled once no pod started for the quiet time.",
    "Bus bandwidth: `gputopo.topology.estimate_gang` on the GPUs each pod got (the fake probes' NodePodGpus "
    "report; the device plugin's choice where nothing was planned) with the operator's tier oversubscription, "
    "the same estimator for every way; mean over jobs of more than one GPU.",
    "API server writes until settled: the API server's own count (`apiserver_request_total`, POST, PUT, PATCH, "
    "DELETE) from just before the way's submission until it settled, whoever wrote: the submission, kube-scheduler, "
    "the kube-controller-manager, kwok, the probes, the operator.",
    "Idle in partial gangs: the GPUs of a pod count from the moment it is seen bound until every pod of its gang "
    "is Running (or until the way settled), summed over pods and integrated over time. kube-scheduler holds a "
    "gang's pods at Permit until the whole group fits and binds none before: GPUs it reserves that way are not "
    "visible on the API and not counted.",
]


def _clear(on: TraceRun, namespace: str) -> None:
    wait_no_pods(on.box, on.core, namespace, lambda: reported_in(on.custom, namespace))
    on.box.kubectl("delete", PODGROUPS, "--all", "-n", namespace, "--wait=false", check=False)


def _with_operator(on: TraceRun, way: Way) -> dict[str, Any]:
    settings = {"GPUTOPO_API_CONCURRENCY": str(on.args.api_concurrency)} if on.args.api_concurrency else None
    with operator_running(on.box, way.namespace, "bench-gangs", log, settings) as operator:
        result = run_way(way, on, log)
    return result | operator


def _floor(on: TraceRun, way: str, placed: list[dict[str, Any]]) -> dict[str, Any]:
    """A floor way: the gated PodGroups submitted with no operator, steered by the floor client to the PodGroup
    way's plans (``placed``: its GangPlacements as they ended)."""
    ns = NAMESPACES[way]
    writes = {gang.gang: gang for item in placed if (gang := steer_writes(FLOORS[way], ns, item))}
    script = str(Path(__file__).with_name("podgroup_floor.py"))
    replayer = Replayer(str(on.box.kubeconfig), ns, writes, script=script).start()
    try:
        result = run_way(Way(way, ns, podgroup_gangs(on.trace, ns, gated=True), BASELINE_LABEL), on, log)
    finally:
        replayer.stop()
    _clear(on, ns)
    return result | {"replay_errors": replayer.errors[:20], "jobs_replayed": len(writes)}


def run_ways(args: argparse.Namespace, on: TraceRun) -> dict[str, dict[str, Any]]:
    trace, custom = on.trace, on.custom
    for namespace in NAMESPACES.values():
        on.box.kubectl("create", "namespace", namespace, check=False)
    ways: dict[str, dict[str, Any]] = {}
    placed: list[dict[str, Any]] = []
    for name in args.ways:
        ns = NAMESPACES[name]
        if name == KUBE:
            ways[name] = run_way(Way(name, ns, podgroup_gangs(trace, ns, gated=False), BASELINE_LABEL), on, log)
            _clear(on, ns)
        elif name == PODGROUP:
            gated = podgroup_gangs(trace, ns, gated=True)
            busbw = lambda: gang_placement_busbw(custom, NAMESPACES[PODGROUP])  # noqa: E731
            ways[name] = _with_operator(on, Way(name, ns, gated, BASELINE_LABEL, busbw))
            placed = custom.list_namespaced_custom_object("gputopo.io", "v1alpha1", ns, "gangplacements")["items"]
            _clear(on, ns)
        elif name in FLOORS:
            ways[name] = _floor(on, name, placed)
        else:
            jobs, selector = manifest(trace, ns, operator=True)
            busbw = lambda: trainingjob_busbw(custom, NAMESPACES[TRAININGJOB])  # noqa: E731
            ways[name] = _with_operator(on, Way(name, ns, jobs, selector, busbw, owner_jobs=True))
    return ways


WAY_KEYS = {"kube": KUBE, "podgroup": PODGROUP, **{key: way for way, key in FLOORS.items()}, "trainingjob": TRAININGJOB}


def _ways(text: str) -> list[str]:
    """The ways named by their keys (run in the report's order); a floor way needs the PodGroup way."""
    keys = {w.strip() for w in text.split(",") if w.strip()}
    unknown = sorted(keys - set(WAY_KEYS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown ways: {', '.join(unknown)} (known: {', '.join(WAY_KEYS)})")
    names = {WAY_KEYS[k] for k in keys}
    if names & set(FLOORS) and PODGROUP not in names:
        raise argparse.ArgumentTypeError("the floor ways steer to the plans of the podgroup way: name it too")
    return [w for w in WAYS if w in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "bench-gangs")
    parser.add_argument(
        "--api-concurrency",
        type=int,
        default=None,
        help="the operator's API requests in flight (GPUTOPO_API_CONCURRENCY; default: the operator's own)",
    )
    parser.add_argument(
        "--ways",
        type=_ways,
        default=list(WAYS),
        help=f"comma-separated ways to run (default all: {','.join(WAY_KEYS)})",
    )
    args = parser.parse_args()

    trace = make_trace(args.jobs, args.seed)
    started = time.monotonic()
    box = Sandbox(args.sandbox)
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.nodes, profile="mixed", probes=True, operator=False, wait=300)
        up_s = time.monotonic() - t0
        on = TraceRun.on(box, trace, args)
        capacity = read_cluster(on.core, on.custom)
        ways = run_ways(args, on)
    finally:
        box.down()
    concurrency = args.api_concurrency or os.environ.get("GPUTOPO_API_CONCURRENCY") or "the operator's default"
    report: dict[str, Any] = {
        **report_head(["bench/bench_gangs.py", *sys.argv[1:]]),
        "config": run_config(args, trace) | {"api_concurrency": concurrency},
        "nodes": len(status.nodes),
        "gpus": sum(t.gpu_count for t in capacity.topologies.values()),
        "node_types": dict(Counter(n.rsplit("-", 1)[0] for n in status.nodes)),
        "sandbox_up_s": up_s,
        "notes": NOTES,
        "trace": [{"name": j.name, "workers": j.workers, "gpusPerWorker": j.gpus_per_worker} for j in trace],
        "summary": summarise(ways, trace),
        "ways": ways,
    }
    report["bench_wall_s"] = time.monotonic() - started
    write_plotted_report("gangs", report, plot, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
