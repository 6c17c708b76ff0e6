"""How long ``kubectl gputopo explain`` and ``status`` and one refresh of the live map take at 1,000 nodes.

A 1,000-node sandbox is too heavy for the shared 2-core machine these reports come from, so the objects are
generated instead: 1,000 nodes of the sandbox's ``mixed`` node types under leaves of 16 and spines of 4 leaves,
their NodeTopologies (the probe's status of each type), the running TrainingJobs that fill about 70% of the GPUs
with their pods, and pending TrainingJobs. They go through the same code path as a live read after the API
server's answer: the list bodies are decoded from JSON text, parsed as the operator parses them
(``live_cluster``), then answered (``explain_job``, ``cluster_status``, ``topology_map`` and its JSON). The
listing itself (seven paged GETs) is not in these figures.

    PYTHONPATH=operator:node-probe python bench/bench_explain.py [--nodes 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime
from typing import Any

from gputopo.api.group import ANNOTATION_GPUS, LABEL_JOB
from gputopo.control.explain import LiveObjects, cluster_status, explain_job, live_cluster, topology_map
from gputopo.control.explain.cluster import TopologyMemo
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import DEFAULT_TIERS
from gputopo.topology.catalog import load_node_type
from gputopo.topology.convert import to_status
from reporting import fmt, report_head, stats, write_report

TYPES = ("hgx-h100", "hgx-h100", "dgx-a100", "h100-nvl-pairs", "l40s-pcie")  # mixed, NVSwitch boards first
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
GOAL_SECONDS = 1.0


def _objects(nodes: int, seed: int) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    rng = random.Random(seed)
    statuses = {
        t: to_status(load_node_type(t)).model_dump(by_alias=True, mode="json", exclude_none=True) for t in TYPES
    }
    out: dict[str, list[dict[str, Any]]] = {"nodes": [], "topologies": [], "pods": [], "jobs": []}
    free: list[tuple[str, int]] = []
    for i in range(nodes):
        name, kind = f"node-{i:04d}", TYPES[(i // 16) % len(TYPES)]
        leaf, spine = f"leaf-{i // 16:03d}", f"spine-{i // 64:02d}"
        out["nodes"].append(
            {
                "metadata": {"name": name, "labels": {TIER0: leaf, TIER1: spine}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        out["topologies"].append({"metadata": {"name": name, "resourceVersion": str(i + 1)}, "status": statuses[kind]})
        free.append((name, len(statuses[kind]["gpus"])))
    rng.shuffle(free)
    template = {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}}
    filled = 0
    for j, (node, gpus) in enumerate(free[: int(len(free) * 0.7)]):
        name = f"run-{j:04d}"
        out["jobs"].append(
            {
                "metadata": {"name": name, "namespace": "team", "uid": f"u-{name}"},
                "spec": {"workers": 1, "gpusPerWorker": gpus, "template": template},
                "status": {
                    "phase": "Running",
                    "placement": {
                        "generation": 1,
                        "estimatedBusBandwidthGBps": 100.0,
                        "bottleneck": "NVLink",
                        "workers": [{"rank": 0, "node": node, "gpus": list(range(gpus))}],
                    },
                },
            }
        )
        out["pods"].append(
            {
                "metadata": {
                    "name": f"{name}-0",
                    "namespace": "team",
                    "labels": {LABEL_JOB: name},
                    "annotations": {ANNOTATION_GPUS: ",".join(map(str, range(gpus)))},
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
                },
                "status": {"phase": "Running"},
            }
        )
        filled += gpus
    pending = []
    for p in range(20):
        name = f"wait-{p:02d}"
        pending.append(name)
        out["jobs"].append(
            {
                "metadata": {"name": name, "namespace": "team", "uid": f"u-{name}"},
                "spec": {
                    "workers": 16 + p,
                    "gpusPerWorker": 8,
                    "topology": {"intraNode": "nvswitch", "interNode": {"requiredTier": 0}},
                    "template": template,
                },
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "Placed", "status": "False", "reason": "Unplaceable", "message": "..."}],
                },
            }
        )
    return out, pending


def _once(
    texts: dict[str, str], pending: list[str], memo: TopologyMemo | None = None, cache: PlacementCache | None = None
) -> dict[str, float]:
    """One answer of each kind from the listed text; with ``memo`` and ``cache`` (the map's refresh) NodeTopologies
    already parsed at their resourceVersion are not parsed again, nor their groups searched again."""
    clock = time.process_time  # CPU seconds of this process: what the answer costs, whatever else runs here
    t0, c0 = time.perf_counter(), clock()
    lists = {k: json.loads(v)["items"] for k, v in texts.items()}
    t1 = time.perf_counter()
    cluster = live_cluster(LiveObjects(**lists), DEFAULT_TIERS, datetime.now(UTC), memo, cache)
    t2, c2 = time.perf_counter(), clock()
    job = cluster.job("team", pending[-1])
    assert job is not None
    lines = explain_job(cluster, job).lines()
    t3, c3 = time.perf_counter(), clock()
    status = cluster_status(cluster).lines()
    t4, c4 = time.perf_counter(), clock()
    body = json.dumps(topology_map(cluster), separators=(",", ":"))
    t5, c5 = time.perf_counter(), clock()
    assert lines and status and body
    return {
        "decode": t1 - t0,
        "parse": t2 - t1,
        "explain": t3 - t2,
        "status": t4 - t3,
        "map": t5 - t4,
        "explainTotal": t3 - t0,
        "statusTotal": (t2 - t0) + (t4 - t3),
        "mapTotal": (t2 - t0) + (t5 - t4),
        "explainTotalCpu": c3 - c0,
        "statusTotalCpu": (c2 - c0) + (c4 - c3),
        "mapTotalCpu": (c2 - c0) + (c5 - c4),
        "mapBytes": float(len(body)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    objects, pending = _objects(args.nodes, args.seed)
    texts = {k: json.dumps({"items": v}) for k, v in objects.items()}
    runs = [_once(texts, pending) for _ in range(args.repeat)]
    memo: TopologyMemo = {}
    cache = PlacementCache()
    _once(texts, pending, memo, cache)
    refreshed = [_once(texts, pending, memo, cache) for _ in range(args.repeat)]
    refreshes = [r["mapTotal"] for r in refreshed]
    keys = [k for k in runs[0] if k != "mapBytes"]
    report: dict[str, Any] = {
        **report_head(sys.argv),
        "source": "generated objects through the code path after the API server's answer (no sandbox)",
        "nodes": args.nodes,
        "gpus": sum(len(t["status"]["gpus"]) for t in objects["topologies"]),
        "runningJobs": len(objects["jobs"]) - len(pending),
        "pendingJobs": len(pending),
        "repeat": args.repeat,
        "seconds": {k: stats([r[k] for r in runs]) for k in keys},
        "mapRefreshSeconds": stats(refreshes),
        "mapRefreshCpuSeconds": stats([r["mapTotalCpu"] for r in refreshed]),
        "loadAverage": os.getloadavg()[0],
        "mapBytes": runs[0]["mapBytes"],
        "goalSeconds": GOAL_SECONDS,
    }
    worst = max(report["seconds"][k]["max"] for k in ("explainTotal", "statusTotal"))
    worst_cpu = max(report["seconds"][k]["max"] for k in ("explainTotalCpu", "statusTotalCpu"))
    report["goalMetCpu"] = worst_cpu <= GOAL_SECONDS
    report["goalMet"] = worst <= GOAL_SECONDS
    rows = "\n".join(f"| {k} | {fmt(v['p50'] * 1000)} | {fmt(v['max'] * 1000)} |" for k, v in report["seconds"].items())
    text = (
        f"# kubectl gputopo explain / status and the map at {args.nodes} nodes\n\n"
        f"`{report['command']}` on {report['machine']}. {report['source']}: {args.nodes} nodes, {report['gpus']} GPUs, "
        f"{report['runningJobs']} running and {report['pendingJobs']} pending TrainingJobs; {args.repeat} runs.\n\n"
        "| step | p50 ms | max ms |\n|---|---|---|\n"
        f"{rows}\n\n"
        f"The map's document is {report['mapBytes'] / 1024:.0f} KiB. A refresh of the map by `gputopo ui` (it keeps "
        f"the NodeTopologies parsed at their resourceVersion, and the engine's cache) takes p50 "
        f"{report['mapRefreshSeconds']['p50'] * 1000:.0f}"
        f" ms, max {report['mapRefreshSeconds']['max'] * 1000:.0f} ms. Goal: `explain` and `status` within "
        f"{GOAL_SECONDS:.0f} s (decode + parse + answer): {'met' if report['goalMet'] else 'NOT met'}, worst "
        f"{worst * 1000:.0f} ms wall, {worst_cpu * 1000:.0f} ms CPU ({'within' if report['goalMetCpu'] else 'over'} "
        f"the goal in CPU); the 1-minute load average was {report['loadAverage']:.1f} on {os.cpu_count()} CPUs, so "
        "wall time here is CPU time stretched by the other work on the machine.\n"
    )
    write_report("explain", report, text)


if __name__ == "__main__":
    main()
