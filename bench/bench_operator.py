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
import sys
import time
from typing import Any

from gang_trace import make_trace
from operator_memory import part_memory
from operator_report import markdown, plot, summarise
from operator_speed import part_speed
from reporting import REPORTS, report_head, write_report
from sandbox_run import add_run_arguments, run_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "bench-operator")
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
        "config": {**run_config(args, trace), "idle_s": args.idle, "steady_samples": args.steady_samples},
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
