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
estimator for every side (``real_gpus.gang_busbw``: ``gputopo.topology.estimate_gang`` on the real GPUs
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
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from allocation_report import markdown, plot
from allocation_side import NAMESPACES, SIDES, log, run_side
from api_metrics import free_port
from floor import FLOOR_SIDES
from gang_trace import Job, make_trace
from gputopo.sandbox import Sandbox
from real_gpus import read_cluster
from reporting import report_head, write_plotted_report
from sandbox_run import TraceRun, add_run_arguments, log_problems, run_config, start_operator

GOAL_RATIO = 1.5


def operator_side(
    side: str, box: Sandbox, trace: Sequence[Job], args: argparse.Namespace, placed: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    port = free_port()
    box.kubectl("create", "namespace", NAMESPACES[side], check=False)  # the operator's ConfigMap goes there
    pid, loop_s, log_file, offset = start_operator(
        box, NAMESPACES[side], f"bench-allocation-{side}", {"GPUTOPO_METRICS_PORT": str(port)}
    )
    log(f"{side}: operator pid {pid}, control loop up after {loop_s:.1f} s")
    try:
        result = run_side(side, TraceRun.on(box, trace, args), metrics_port=port, placed=placed)
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
            on = TraceRun.on(box, trace, args)
            facts = read_cluster(on.core, on.custom)
            out["nodes"], out["gpus"] = len(facts.topologies), sum(t.gpu_count for t in facts.topologies.values())
            if side == "kube-scheduler":
                out[side] = run_side(side, on)
            elif side in FLOOR_SIDES:
                out[side] = run_side(side, on, placed=placed)
            else:
                out[side] = operator_side(side, box, trace, args, placed)
        finally:
            if not args.keep:
                box.down()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "bench-allocation")
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
        "config": {**run_config(args, trace), "nodes": args.nodes, "goal_ratio_p50": GOAL_RATIO},
        "results": results,
        "bench_wall_s": time.monotonic() - started,
    }
    if args.code:
        report["code"] = args.code
    if args.before:
        report["before"] = {
            k: v for k, v in json.loads(Path(args.before).read_text()).items() if k in ("command", "code", "results")
        }
    write_plotted_report(args.out, report, plot, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
