"""Who gets the nodes multi-node gangs need: the sandbox trace placed by gputopo's engine three ways, in-process.

``bench_kueue.py`` compares the mean bus bandwidth of multi-node jobs under gputopo and Kueue TAS. On the ``mixed``
sandbox (a leaf switch holds two nodes of one type, types change leaf by leaf) and the trace's demand (90 % of the
GPUs), which nodes the multi-node gangs get depends on which ones the one-node jobs took before them. This replays
the same trace (seed 7, 200 jobs) through ``gputopo.placement.engine.place`` on the same node layout (names,
leaves, spines, tier oversubscription), no API server, every job placed in turn and holding its GPUs, the device
plugin choosing GPUs within a node as in the benchmarks' devicePlugin mode:

* ``arrival order``: as the operator places them: each job in turn gets its fastest fitting place;
* ``multi-node first``: the multi-node gangs placed before every one-node job (the most any reordering of the
  queue can give them);
* ``H100 kept for multi-node``: one-node jobs placed off the HGX H100 nodes while any other node fits them (what an
  administrator gets by tainting those nodes for multi-node jobs).

Per way: the mean bus bandwidth of multi-node jobs, against Kueue TAS's in ``reports/kueue.json`` when there is
one (the same trace on the same sandbox), and of all multi-GPU jobs, by job size. Also what one node is worth to
each kind of job (``estimate_gang`` on whole nodes): an H100 node gives a one-node 8-GPU job 242 GB/s more than an
A100 node, and a 2x8 gang, which needs two of them, 188 GB/s more on an H100 leaf.

Writes bench/reports/multinode_share.{json,md}.
Run: python bench/bench_multinode_share.py [--jobs 200 --nodes 256 --seed 7]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gang_trace import SIZES, Job, make_trace
from gputopo.placement.engine import place
from gputopo.placement.types import DEFAULT_TIERS, GpuChoice, NodeInfo, Placement, Request, Snapshot
from gputopo.sandbox.profiles import TIER0_LABEL, TIER1_LABEL, plan_nodes
from gputopo.topology.catalog import load_node_type
from gputopo.topology.gang import estimate_gang
from kueue_report import TAS
from reporting import REPORTS, fmt, mean, report_head, write_report

KEPT = "hgx-h100"  # the node type kept for multi-node gangs in the third way
ARRIVAL, MULTI_FIRST, KEEP = "arrival order", "multi-node first", f"{KEPT.upper()} kept for multi-node"
WAYS = (ARRIVAL, MULTI_FIRST, KEEP)
_TYPE_LABEL = "node.kubernetes.io/instance-type"
WORTH_TYPES = ("hgx-h100", "dgx-a100", "hgx-a100", "dgx1-v100", "h100-nvl-pairs", "rtx4090-pcie")


def sandbox_snapshot(nodes: int) -> Snapshot:
    """The ``mixed`` sandbox's nodes as the operator sees them: names, types, leaf and spine labels."""
    infos = []
    topologies: dict[str, Any] = {}
    for plan in plan_nodes("mixed", nodes):
        topology = topologies.setdefault(plan.node_type, load_node_type(plan.node_type))
        labels = {TIER0_LABEL: plan.leaf, TIER1_LABEL: plan.spine, _TYPE_LABEL: plan.node_type}
        infos.append(NodeInfo(plan.name, topology, labels, driver_version=topology.system.driver_version))
    return Snapshot(infos, DEFAULT_TIERS)


def _request(job: Job) -> Request:
    return Request(
        job.workers, job.gpus_per_worker, name=job.name, same_model=False, gpu_choice=GpuChoice.DEVICE_PLUGIN
    )


Placer = Callable[[Snapshot, Job], Placement | None]


def _anywhere(snapshot: Snapshot, job: Job) -> Placement | None:
    placed = place(snapshot, _request(job))
    return placed if isinstance(placed, Placement) else None


def _kept_for_multi_node(snapshot: Snapshot, job: Job) -> Placement | None:
    if job.workers == 1:
        others = [
            i for i, node in enumerate(snapshot.nodes) if node.labels.get("node.kubernetes.io/instance-type") != KEPT
        ]
        placed = place(snapshot.part(others), _request(job))
        if isinstance(placed, Placement):
            return placed
    return _anywhere(snapshot, job)


def replay(snapshot: Snapshot, jobs: Sequence[Job], placer: Placer) -> dict[str, dict[str, Any]]:
    """Each job in turn placed and holding its GPUs: per job its bus bandwidth, nodes and tier (None: unplaced)."""
    rows: dict[str, dict[str, Any]] = {}
    for job in jobs:
        placed = placer(snapshot, job)
        if placed is None:
            rows[job.name] = {"placed": False}
            continue
        snapshot = snapshot.reserve(placed)
        rows[job.name] = {"placed": True, "busbw_gbps": placed.busbw_gbps, "nodes": sorted(set(placed.nodes))}
    return rows


def summarise(trace: Sequence[Job], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    placed = [j for j in trace if rows[j.name]["placed"]]
    by_size = {}
    for shape in (s for s in SIZES if s[0] * s[1] > 1):  # one GPU does no all-reduce
        jobs = [j for j in placed if (j.workers, j.gpus_per_worker) == shape]
        by_size[f"{shape[0]}x{shape[1]}"] = {
            "jobs": len(jobs),
            "busbw_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in jobs]),
        }
    return {
        "jobs_placed": len(placed),
        "multi_node_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in placed if j.workers > 1]),
        "multi_gpu_mean_gbps": mean([rows[j.name]["busbw_gbps"] for j in placed if j.gpus > 1]),
        "by_size": by_size,
    }


def node_worth() -> dict[str, dict[str, float]]:
    """Per node type: a one-node 8-GPU job's bus bandwidth on it, and a 2x8 gang's on two of them in one leaf."""
    out = {}
    for name in WORTH_TYPES:
        topology = load_node_type(name)
        whole = (topology, tuple(range(topology.gpu_count)))
        out[name] = {
            "one_node_gbps": estimate_gang([whole]).busbw_gbps,
            "two_nodes_one_leaf_gbps": estimate_gang([whole, whole]).busbw_gbps,
        }
    return out


def _kueue_tas_multi_node() -> float | None:
    """Kueue TAS's mean bus bandwidth on multi-node jobs in the committed ``bench_kueue.py`` report, if any."""
    path = REPORTS / "kueue.json"
    if not path.exists():
        return None
    both = json.loads(path.read_text()).get("summary", {}).get("multi_node_both") or {}
    value = both.get(TAS)
    return float(value) if value is not None else None


def markdown(report: dict[str, Any]) -> str:
    ways, tas = report["ways"], report["kueue_tas_multi_node_gbps"]
    out = [
        "# Who gets the nodes multi-node gangs need",
        "",
        f"`{report['command']}` — {report['machine']}; the `mixed` sandbox's {report['nodes']} nodes, "
        f"{report['jobs']} jobs (seed {report['seed']}), placed by gputopo's engine in-process, each job holding "
        "its GPUs.",
        "",
        "| | " + " | ".join(WAYS) + " |",
        "|---|" + "---:|" * len(WAYS),
        "| jobs placed | " + " | ".join(str(ways[w]["jobs_placed"]) for w in WAYS) + " |",
        "| multi-node jobs, mean bus bandwidth (GB/s) | "
        + " | ".join(fmt(ways[w]["multi_node_mean_gbps"]) for w in WAYS)
        + " |",
    ]
    if tas:
        out.append(
            f"| the same against Kueue TAS's {fmt(tas)} GB/s | "
            + " | ".join(f"{fmt(ways[w]['multi_node_mean_gbps'] / tas, '.2f')}x" for w in WAYS)
            + " |"
        )
    out.append(
        "| multi-GPU jobs, mean bus bandwidth (GB/s) | "
        + " | ".join(fmt(ways[w]["multi_gpu_mean_gbps"]) for w in WAYS)
        + " |"
    )
    for size in ways[ARRIVAL]["by_size"]:
        cells = [fmt(ways[w]["by_size"][size]["busbw_mean_gbps"]) for w in WAYS]
        out.append(f"| {size} jobs, mean (GB/s) | " + " | ".join(cells) + " |")
    out += [
        "",
        "What one node is worth, gputopo's estimator on whole nodes (GB/s):",
        "",
        "| node type | a one-node 8-GPU job | a 2x8 gang on two of them in one leaf |",
        "|---|---:|---:|",
    ]
    for name, worth in report["node_worth"].items():
        out.append(f"| {name} | {fmt(worth['one_node_gbps'])} | {fmt(worth['two_nodes_one_leaf_gbps'])} |")
    out += [
        "",
        "Arrival order is what the operator does. Multi-node first is the most a reordering of the queue gives the "
        "multi-node gangs; keeping the H100 nodes for them is what an administrator gets by tainting those nodes. "
        "Kueue TAS's figure is the committed `bench_kueue.py` report's (the same trace on the sandbox itself).",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    trace = make_trace(args.jobs, args.seed)
    multi_first = [j for j in trace if j.workers > 1] + [j for j in trace if j.workers == 1]
    orders: dict[str, tuple[Sequence[Job], Placer]] = {
        ARRIVAL: (trace, _anywhere),
        MULTI_FIRST: (multi_first, _anywhere),
        KEEP: (trace, _kept_for_multi_node),
    }
    snapshot = sandbox_snapshot(args.nodes)
    report: dict[str, Any] = {
        **report_head(["bench/bench_multinode_share.py", *sys.argv[1:]]),
        "nodes": args.nodes,
        "jobs": args.jobs,
        "seed": args.seed,
        "kueue_tas_multi_node_gbps": _kueue_tas_multi_node(),
        "node_worth": node_worth(),
    }
    report["ways"] = {way: summarise(trace, replay(snapshot, jobs, placer)) for way, (jobs, placer) in orders.items()}
    write_report("multinode_share", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
