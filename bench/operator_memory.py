"""Part 2 of ``bench_operator.py``: the operator's resident memory on a separate 1,000-node sandbox (probes
every 5 s), with the nodes only and then with ``--mem-jobs`` TrainingJobs once the queue is steady.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from typing import Any

from gang_trace import Job, training_jobs
from gputopo.api.conditions import PLACED
from gputopo.api.group import LABEL_JOB
from gputopo.sandbox import Sandbox
from gputopo.sandbox.processes import rss_mib
from operator_speed import log
from sandbox_run import clients, log_problems, settle, start_operator, training_job_items
from stamps import Stamper

__all__ = ["GOAL_RSS_MB", "NS_MEMORY", "part_memory"]

NS_MEMORY = "bench-op-memory"
GOAL_RSS_MB = 150.0


def _placed_reason(job: dict[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == PLACED:
            return f"{cond.get('reason')} ({str(cond.get('message', ''))[:80]})"
    return f"no {PLACED} condition yet"


def part_memory(args: argparse.Namespace) -> dict[str, Any]:
    box = Sandbox(args.sandbox + "-1k")
    samples: list[tuple[float, float, str]] = []
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.mem_nodes, profile="mixed", probes=True, operator=False, probe_interval=5, wait=600)
        up_s = time.monotonic() - t0
        core, custom = clients(box)
        box.kubectl("create", "namespace", NS_MEMORY, check=False)
        pid, loop_s, log_file, offset = start_operator(box, NS_MEMORY, "bench-operator-memory")
        log(f"operator pid {pid} on {len(status.nodes)} nodes: control loop up after {loop_s:.1f} s")
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
            clock = Stamper(core, custom, NS_MEMORY, LABEL_JOB, jobs_too=False).start()
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
            listed = training_job_items(custom, NS_MEMORY)
            phases = Counter(str((item.get("status") or {}).get("phase")) for item in listed)
            # Why the jobs that are not Running are where they are: the reason of their Placed condition.
            reasons = Counter(
                f"{(item.get('status') or {}).get('phase')}: {_placed_reason(item)}"
                for item in listed
                if (item.get("status") or {}).get("phase") != "Running"
            )
            restarted = sum(1 for item in listed if int((item.get("status") or {}).get("restarts") or 0) > 0)
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
