"""Part 1 of ``bench_operator.py``: the trace on a 256-node sandbox, once to kube-scheduler alone and once to
the operator; per job its time to Running and the bus bandwidth of the GPUs its pods got.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gang_trace import Job, manifest
from gputopo.sandbox import Sandbox
from gputopo.sandbox.processes import rss_mib
from real_gpus import device_plugin_gpus, gang_busbw, pods_by_node, read_cluster, reported_in, wait_reported
from sandbox_run import (
    TraceRun,
    log_problems,
    logger,
    start_operator,
    submit_and_settle,
    training_job_items,
    wait_no_pods,
)
from stamps import Stamper

__all__ = ["NS_GPUTOPO", "NS_KUBE", "log", "part_speed", "run_side"]

NS_KUBE = "bench-op-kube"
NS_GPUTOPO = "bench-op-gputopo"

log = logger("bench-operator")


def run_side(side: str, on: TraceRun, operator_pid: int | None = None) -> dict[str, Any]:
    box, core, custom, trace = on.box, on.core, on.custom, on.trace
    ours = side != "kube-scheduler"
    namespace = NS_GPUTOPO if ours else NS_KUBE
    submitted, selector = manifest(trace, namespace, operator=ours)
    expected = sum(j.workers for j in trace)
    clock = Stamper(core, custom, namespace, selector, jobs_too=False).start()
    time.sleep(1.0)  # the watch is open before anything is submitted
    log(f"{side}: submitting {len(submitted['items'])} objects")
    run = submit_and_settle(box, submitted, clock.running, expected, on.args)
    clock.stop()
    running_at, nodes = clock.running_on()
    log(f"{side}: {len(running_at)}/{expected} pods Running; settled after {run.settled_s:.1f} s ({run.because})")
    rss = rss_mib(operator_pid) if operator_pid else None

    statuses: dict[str, dict[str, Any]] = {}
    if ours:
        statuses = {
            item["metadata"]["name"]: item.get("status") or {} for item in training_job_items(custom, namespace)
        }
    pods_on = pods_by_node(trace, nodes)
    reported = wait_reported(custom, namespace, len(running_at))
    facts = read_cluster(core, custom)
    held, fallbacks = device_plugin_gpus(namespace, pods_on, facts)

    rows: dict[str, dict[str, Any]] = {}
    mismatched = 0
    for job in trace:
        up = [p for p in job.pods() if p in running_at]
        row: dict[str, Any] = {"running": len(up) == job.workers, "pods_running": len(up)}
        if row["running"]:
            row["seconds"] = max(running_at[p] for p in up) - run.t0
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
        **run.result_head(namespace, len(submitted["items"]), expected),
        "pods_running": len(running_at),
        "gpus_in_use": sum(size for pods in pods_on.values() for _, size in pods),
        "jobs_running": sum(1 for r in rows.values() if r["running"]),
        "partial_gangs": sum(1 for r in rows.values() if not r["running"] and r["pods_running"]),
        "gpus_idle_in_partial_gangs": sum(
            r["pods_running"] * j.gpus_per_worker for j in trace if not (r := rows[j.name])["running"]
        ),
        "last_job_running_s": max(times) if times else None,
        "first_pod_running_s": min(running_at.values()) - run.t0 if running_at else None,
        "pods_reported_by_probes": reported,
        "pods_gpus_from_lowest_free_indices": fallbacks,
        "jobs": rows,
    }
    if ours:
        result["phases"] = dict(Counter(str(s.get("phase")) for s in statuses.values()))
        result["planned_gpus_differing_from_probe_report"] = mismatched
        if rss is not None:
            result["operator_rss_mib"], result["operator_hwm_mib"] = rss
    return result


def part_speed(args: argparse.Namespace, trace: Sequence[Job]) -> dict[str, Any]:
    box = Sandbox(args.sandbox)
    try:
        t0 = time.monotonic()
        status = box.up(nodes=args.nodes, profile="mixed", probes=True, operator=False, wait=300)
        up_s = time.monotonic() - t0
        on = TraceRun.on(box, trace, args)
        capacity = read_cluster(on.core, on.custom)
        gpus = sum(t.gpu_count for t in capacity.topologies.values())
        for ns in (NS_KUBE, NS_GPUTOPO):
            box.kubectl("create", "namespace", ns, check=False)

        kube = run_side("kube-scheduler", on)
        wait_no_pods(box, on.core, NS_KUBE, lambda: reported_in(on.custom, NS_KUBE))

        pid, loop_s, log_file, offset = start_operator(box, NS_GPUTOPO, "bench-operator")
        log(f"operator pid {pid}: control loop up after {loop_s:.1f} s")
        try:
            ours = run_side("gputopo", on, operator_pid=pid)
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
