"""The document the live map draws: switches and NVLink domains as nested regions, each node's GPUs with the
gang that holds them, the parts that are not healthy, the gangs (bus bandwidth, bottleneck) and the waiting
gangs with their explanation. Compact on purpose: at 1,000 nodes it is one small JSON fetch a poll."""

from __future__ import annotations

from typing import Any

from gputopo.control.explain.cluster import LiveCluster
from gputopo.control.explain.explanation import explain_gang, explain_job
from gputopo.control.explain.health import node_faults
from gputopo.control.explain.occupancy import held_gangs, waiting
from gputopo.control.explain.reasons import rank_of

__all__ = ["MAX_EXPLAINED", "topology_map"]

MAX_EXPLAINED = 8  # waiting gangs explained in full on the map (first to fix first); the rest show the operator's words


def _regions(cluster: LiveCluster) -> dict[str, Any]:
    """Tiers top first, then the multi-node NVLink domain (rack) when the node is in one; leaves list nodes."""
    snapshot = cluster.snapshot
    root: dict[str, Any] = {"name": "cluster", "level": "cluster", "children": {}, "nodes": []}
    levels = [f"tier-{t}" for t in range(len(snapshot.tiers))][::-1]
    for i, node in enumerate(snapshot.nodes):
        here = root
        path = list(snapshot.domains[i][::-1])
        for level, name in zip(levels, path, strict=True):
            if name.startswith("node/"):
                continue
            here = here["children"].setdefault(name, {"name": name, "level": level, "children": {}, "nodes": []})
        nvl = snapshot.nvlink_domains[i]
        if nvl:
            here = here["children"].setdefault(
                f"nvl/{nvl}", {"name": nvl, "level": "nvlink", "children": {}, "nodes": []}
            )
        here["nodes"].append(node.name)

    def flat(region: dict[str, Any]) -> dict[str, Any]:
        return {**region, "children": [flat(c) for _, c in sorted(region["children"].items())]}

    return flat(root)


def topology_map(cluster: LiveCluster) -> dict[str, Any]:
    gangs = held_gangs(cluster)
    index = {g.id: i for i, g in enumerate(gangs)}
    holder: dict[tuple[str, int], int] = {}
    for held in gangs:
        for name, gpus in held.workers:
            for gpu in gpus:
                holder[(name, gpu)] = index[held.id]
    nodes = []
    for node in cluster.snapshot.nodes:
        count = node.topology.gpu_count
        used = node.used_gpus
        nodes.append(
            {
                "name": node.name,
                "model": node.gpu_model,
                # per GPU: the index of the gang holding it, -1 free, -2 used by something that is no gang of ours
                "gpus": [holder.get((node.name, g), -2 if g in used else -1) for g in range(count)],
                "faults": [f"{f.part} {f.state}" for f in node_faults(node)],
                "nics": [[n.name, str(n.state.value)] for n in node.topology.nics],
                "ready": node.ready,
                "schedulable": node.schedulable,
            }
        )
    pending = []
    ranked = sorted(waiting(cluster), key=lambda w: (rank_of(w[2]), w[1]))
    for n, (kind, name, reason, message) in enumerate(ranked):
        entry: dict[str, Any] = {"kind": kind, "name": name, "reason": str(reason), "message": message}
        if n < MAX_EXPLAINED:
            namespace, short = name.split("/", 1)
            job = cluster.job(namespace, short) if kind == "TrainingJob" else None
            gang = cluster.gang(namespace, short) if kind == "GangPlacement" else None
            found = explain_job(cluster, job) if job is not None else explain_gang(cluster, gang) if gang else None
            if found is not None:
                entry["explanation"] = found.lines()
        pending.append(entry)
    return {
        "observedAt": cluster.now.isoformat(),
        "regions": _regions(cluster),
        "nodes": nodes,
        "gangs": [
            {
                "id": g.id,
                "kind": g.kind,
                "busBandwidthGBps": round(g.busbw_gbps, 1),
                "bottleneck": g.bottleneck,
                "gpus": g.gpu_count,
                "nodes": sorted({n for n, _ in g.workers}),
                "restarts": g.restarts,
            }
            for g in gangs
        ],
        "pending": pending,
    }
