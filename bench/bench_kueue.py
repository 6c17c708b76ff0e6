"""gputopo beside the real Kueue: the trace of ``bench_operator.py`` placed four ways on one sandbox with Kueue's
manager, and by the floor client, in one run.

One ``mixed`` sandbox (256 nodes, fake probes) started with Kueue v0.17's manager (``gputopo sandbox up
--kueue``: a Topology over the two switch tiers and ``kubernetes.io/hostname``, a TAS flavor ``kueue-tas`` and a
flavor without a topology ``gputopo``, each ClusterQueue's quota the sandbox's GPUs, CPU and memory). The trace
(200 jobs of 1 to 4 pods, fixed seed) goes to each side in one ``kubectl create`` into a namespace of its own:

* ``kube-scheduler``: one plain pod per worker, no Kueue queue, no operator (``bench_operator.py``'s plain side);
* ``Kueue TAS``: the same pods as Kueue pod groups in the TAS flavor's LocalQueue, with the topology annotation a
  Kueue user would write (``kueue_trace``); Kueue admits each group by quota and places it, kube-scheduler binds;
* ``gputopo``: the trace's TrainingJobs, the operator running (``bench_operator.py``'s gputopo side);
* ``gputopo under Kueue``: the same TrainingJobs labelled for the LocalQueue of the flavor without a topology:
  gputopo makes a Kueue Workload of each and places it once Kueue admits it;
* ``minimal``: no operator; the floor client of ``floor.py`` makes, for each TrainingJob as it is seen, the
  pods and Service of the placement the ``gputopo`` side chose and one status write once its pods run;
* ``minimal under Kueue``: the same floor client for the queued TrainingJobs of ``gputopo under Kueue``: it makes
  each job's Workload (the operator's own body) and the same writes once Kueue admits it: what Kueue's protocol
  alone costs beside the least writes, the floor under the ``gputopo under Kueue`` side.

Per side: time to Running per job (every pod Running, from the start of the submission) p50 / p90 and the
whole trace; bus bandwidth through gputopo's estimator on the GPUs each pod got (``real_gpus``), mean over
multi-node and over multi-GPU jobs; GPUs held by bound pods of gangs not all Running (``podgroup_run``); the API
server's writes and each component's CPU seconds, Kueue's manager apart (``side_costs``).

Writes bench/reports/kueue.{json,md,png}.
Run: python bench/bench_kueue.py [--jobs 200 --nodes 256 --seed 7 --sides kube-scheduler,Kueue TAS,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s

from floor import Replayer, gang_writes
from gang_trace import BASELINE_LABEL, Job, baseline_pods, make_trace, training_jobs
from gputopo.api.group import LABEL_JOB
from gputopo.sandbox import Sandbox
from gputopo.sandbox.kueue_install import KUEUE_VERSION
from gputopo.sandbox.kueue_queues import GPUTOPO_QUEUE, TAS_QUEUE, local_queue
from kueue_report import FLOOR, FLOOR_UNDER_KUEUE, GPUTOPO, KUBE, SIDES, TAS, UNDER_KUEUE, markdown, plot, summarise
from kueue_trace import queued_training_jobs, tas_pod_groups
from podgroup_run import Way, run_way, trainingjob_busbw
from real_gpus import read_cluster, reported_in
from reporting import REPORTS, report_head, stats, write_plotted_report
from sandbox_run import (
    TraceRun,
    add_run_arguments,
    logger,
    operator_running,
    run_config,
    training_job_items,
    wait_no_pods,
)

log = logger("bench-kueue")

NAMESPACES = {
    KUBE: "bench-kueue-kube",
    TAS: "bench-kueue-tas",
    GPUTOPO: "bench-kueue-gputopo",
    UNDER_KUEUE: "bench-kueue-quota",
    FLOOR: "bench-kueue-minimal",
    FLOOR_UNDER_KUEUE: "bench-kueue-minimal-quota",
}
KUEUE_WORKLOADS = "workloads.kueue.x-k8s.io"
FULL_SIZE = (200, 256)

NOTES = [
    "Time to Running: from the start of the side's one `kubectl create` until every pod of the job is seen "
    "Running on a watch. Pods never finish (the trace has no durations), so jobs that do not fit wait; a side is "
    "settled once no pod started for the quiet time.",
    "Kueue TAS: Kueue pod groups rather than Indexed batch/v1 Jobs, because the sandbox's kwok completes a Job's "
    "pods as soon as they run (its pod-complete stage selects pods a Job owns), which would hand their GPUs and "
    "quota back at once; the pods and their requests are the same as a Job's, and Kueue places a pod group by "
    "its TAS as it does a Job. A one-pod job asks for `podset-required-topology: kubernetes.io/hostname`, a "
    "multi-node job for `podset-preferred-topology: fabric.topograph.run/tier-0` (a leaf, then a spine, then "
    "anywhere).",
    "Kueue's manager runs through every side (its pod webhook sees every pod, as on any cluster with Kueue), and "
    "its CPU is counted apart (`kueue`).",
    "Bus bandwidth: `gputopo.topology.estimate_gang` on the GPUs each pod got (the fake probes' NodePodGpus "
    "report; lowest free indices where a pod is not reported) with the operator's tier oversubscription, one "
    "estimator for every side. Multi-node: jobs of more than one worker; multi-GPU: jobs of more than one GPU.",
    "Idle in partial gangs: the GPUs of a pod from the moment it is seen bound until every pod of its job is "
    "Running (or the side settled), integrated over time.",
    "Against the floor: the 'minimal' floor client of `bench/floor.py` replays the gputopo side's placements "
    "with the least writes that keep the status contract; the goal is judged on the p50 time to Running, as the "
    "median of the ratios of several rounds of the gputopo side and the floor client in turn (the tables show "
    "the first round; the submission's own time varies by seconds between rounds on this host). "
    "'minimal under Kueue' is the same client for the queued TrainingJobs: it makes each job's Workload (the "
    "operator's body) and the same writes once Kueue admits it; its time against the 'minimal' side's is what "
    "Kueue's protocol alone costs here.",
]


def _clear_pods(on: TraceRun, namespace: str) -> None:
    """Every pod of ``namespace`` gone: Kueue's finalizer taken off the pods it manages, and its Workloads."""
    on.box.kubectl("delete", KUEUE_WORKLOADS, "--all", "-n", namespace, "--wait=false", check=False)
    on.box.kubectl(
        "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false", check=False
    )
    for pod in on.core.list_namespaced_pod(namespace).items:
        if pod.metadata.finalizers:
            try:
                on.core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})
            except k8s.ApiException as error:
                if error.status != 404:  # gone meanwhile
                    raise
    wait_no_pods(on.box, on.core, namespace, lambda: reported_in(on.custom, namespace))


def _clear_training_jobs(on: TraceRun, namespace: str) -> None:
    """The TrainingJobs of ``namespace`` deleted while the operator still runs (it holds their finalizers), their
    pods and Workloads gone."""
    on.box.kubectl("delete", "trainingjobs.gputopo.io", "--all", "-n", namespace, "--timeout=120s", timeout=180)
    _clear_pods(on, namespace)


def _operator_side(on: TraceRun, side: str, manifest: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A side of TrainingJobs with the operator running; its result and the TrainingJobs as they ended."""
    ns = NAMESPACES[side]
    with operator_running(on.box, ns, "bench-kueue", log) as operator:
        busbw = lambda: trainingjob_busbw(on.custom, ns)  # noqa: E731
        way = Way(side, ns, manifest, LABEL_JOB, busbw, owner_jobs=True, workloads=side == UNDER_KUEUE)
        result = run_way(way, on, log)
        items = training_job_items(on.custom, ns)
        _clear_training_jobs(on, ns)
    return result | operator, items


def _floor_side(on: TraceRun, placed: list[dict[str, Any]], side: str = FLOOR) -> dict[str, Any]:
    """The floor client's side, alone or (``FLOOR_UNDER_KUEUE``) under Kueue's quota."""
    ns = NAMESPACES[side]
    queue = GPUTOPO_QUEUE if side == FLOOR_UNDER_KUEUE else None
    writes = {
        item["metadata"]["name"]: gang
        for item in placed
        if (gang := gang_writes(FLOOR, ns, item["metadata"]["name"], item["spec"], item.get("status") or {}, queue))
    }
    manifest = training_jobs(on.trace, ns) if queue is None else queued_training_jobs(on.trace, ns)
    replayer = Replayer(str(on.box.kubeconfig), ns, writes).start()
    try:
        way = Way(side, ns, manifest, LABEL_JOB, owner_jobs=True, workloads=queue is not None)
        result = run_way(way, on, log)
    finally:
        replayer.stop()
    _clear_training_jobs(on, ns)  # no operator holds their finalizers; the sides after this one need the GPUs
    return result | {"replay_errors": replayer.errors[:20], "jobs_replayed": len(writes)}


def _pair(ours: Mapping[str, Any], floor: Mapping[str, Any]) -> dict[str, float | None]:
    """One round of the gputopo side and the floor client after it: each one's p50 and whole trace (s)."""

    def times(result: Mapping[str, Any]) -> dict[str, float | None]:
        return stats([row["seconds"] for row in result["jobs"].values() if row["running"]])

    a, b = times(ours), times(floor)
    return {"gputopo_p50": a["p50"], "minimal_p50": b["p50"], "gputopo_whole": a["max"], "minimal_whole": b["max"]}


def run_sides(on: TraceRun, sides: list[str], floor_rounds: int = 1) -> dict[str, dict[str, Any]]:
    box, trace = on.box, on.trace
    for ns in NAMESPACES.values():
        box.kubectl("create", "namespace", ns, check=False)
    queues = [
        local_queue(TAS_QUEUE, NAMESPACES[TAS], TAS_QUEUE),
        local_queue(GPUTOPO_QUEUE, NAMESPACES[UNDER_KUEUE], GPUTOPO_QUEUE),
        local_queue(GPUTOPO_QUEUE, NAMESPACES[FLOOR_UNDER_KUEUE], GPUTOPO_QUEUE),
    ]
    box.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": queues}))
    out: dict[str, dict[str, Any]] = {}
    plain: dict[str, Callable[[str], dict[str, Any]]] = {
        KUBE: lambda ns: baseline_pods(trace, ns),
        TAS: lambda ns: tas_pod_groups(trace, ns),
    }
    placed: list[dict[str, Any]] = []
    for side in sides:
        ns = NAMESPACES[side]
        if side in plain:
            out[side] = run_way(Way(side, ns, plain[side](ns), BASELINE_LABEL), on, log)
            _clear_pods(on, ns)
        elif side == GPUTOPO:
            out[side], placed = _operator_side(on, side, training_jobs(trace, ns))
        elif side == UNDER_KUEUE:
            out[side], _ = _operator_side(on, side, queued_training_jobs(trace, ns))
        else:
            out[side] = _floor_side(on, placed, side)
    if GPUTOPO in out and FLOOR in out:
        # One round says how fast this host happened to be: the submission alone varies by seconds between runs.
        rounds = [_pair(out[GPUTOPO], out[FLOOR])]
        for n in range(2, floor_rounds + 1):
            log(f"against the floor, round {n} of {floor_rounds}")
            ours, placed = _operator_side(on, GPUTOPO, training_jobs(trace, NAMESPACES[GPUTOPO]))
            rounds.append(_pair(ours, _floor_side(on, placed)))
        out[FLOOR]["paired_rounds"] = rounds
    return out


def _sides(text: str) -> list[str]:
    sides = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        raise SystemExit(f"unknown sides: {', '.join(unknown)} (known: {', '.join(SIDES)})")
    for floor in (FLOOR, FLOOR_UNDER_KUEUE):
        if floor in sides and (GPUTOPO not in sides or sides.index(GPUTOPO) > sides.index(floor)):
            raise SystemExit(f"{floor} replays the {GPUTOPO} side's placements: run {GPUTOPO} before it")
    return sides


def render(name: str) -> int:
    """The Markdown and plot of ``bench/reports/<name>.json`` written again, its summary made anew from its
    sides (the figures a run measured stay as they are)."""
    report = json.loads((REPORTS / f"{name}.json").read_text())
    trace = [Job(j["name"], j["workers"], j["gpusPerWorker"]) for j in report["trace"]]
    report["summary"] = summarise(report["sides"], trace)
    write_plotted_report(name, report, plot, markdown)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "bench-kueue")
    parser.add_argument("--sides", default=",".join(SIDES), help="which of " + ", ".join(SIDES))
    parser.add_argument("--out", default="kueue", help="report name under bench/reports/")
    parser.add_argument(
        "--floor-rounds",
        type=int,
        default=3,
        help="rounds of the gputopo side and the floor client in turn; the floor goal is judged on their median",
    )
    parser.add_argument("--render", action="store_true", help="write the report again from its JSON, run nothing")
    args = parser.parse_args()
    if args.render:
        return render(args.out)
    sides = _sides(args.sides)

    trace = make_trace(args.jobs, args.seed)
    load_before = os.getloadavg()
    started = time.monotonic()
    box = Sandbox(args.sandbox)
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.nodes, profile="mixed", probes=True, operator=False, wait=300, kueue=True)
        up_s = time.monotonic() - t0
        on = TraceRun.on(box, trace, args)
        capacity = read_cluster(on.core, on.custom)
        results = run_sides(on, sides, max(1, args.floor_rounds))
    finally:
        box.down()
    report: dict[str, Any] = {
        **report_head(["bench/bench_kueue.py", *sys.argv[1:]]),
        "config": {**run_config(args, trace), "full_size": (args.jobs, args.nodes) == FULL_SIZE},
        "nodes": len(status.nodes),
        "gpus": sum(t.gpu_count for t in capacity.topologies.values()),
        "kueue_version": KUEUE_VERSION,
        "sandbox_up_s": up_s,
        "notes": NOTES,
        "trace": [{"name": j.name, "workers": j.workers, "gpusPerWorker": j.gpus_per_worker} for j in trace],
        "summary": summarise(results, trace),
        "sides": results,
    }
    report["bench_wall_s"] = time.monotonic() - started
    report["host_load"] = {"before": list(load_before), "after": list(os.getloadavg())}
    write_plotted_report(args.out, report, plot, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
