"""``status``: the cluster by domain — free and used GPUs, the gangs of 8, 16 and 64 GPUs that still fit under one
leaf, the parts that are not healthy, the gangs in each domain and the waiting gangs by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gputopo.api.trainingjob import IntraNode
from gputopo.control.explain.cluster import LiveCluster
from gputopo.control.explain.health import node_faults
from gputopo.control.explain.occupancy import held_gangs, waiting
from gputopo.placement.filters import node_rejection
from gputopo.placement.groups import node_offer
from gputopo.placement.types import Request

__all__ = ["FIT_SIZES", "ClusterStatus", "DomainStatus", "cluster_status"]

FIT_SIZES = (8, 16, 64)  # gangs of these many GPUs, in whole 8-GPU workers under one leaf switch
_WORKER = 8


@dataclass(slots=True)
class DomainStatus:
    name: str
    nodes: int = 0
    gpus: int = 0
    used: int = 0
    slots: int = 0  # free 8-GPU NVLink-or-better worker groups on schedulable nodes
    unhealthy: list[str] = field(default_factory=list)
    gangs: set[str] = field(default_factory=set)

    def fits(self) -> dict[int, int]:
        return {size: self.slots // (size // _WORKER) for size in FIT_SIZES}

    def to_data(self) -> dict[str, Any]:
        return {
            "domain": self.name,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "usedGpus": self.used,
            "freeGpus": self.gpus - self.used,
            "fits": {str(k): v for k, v in self.fits().items()},
            "unhealthy": self.unhealthy,
            "gangs": sorted(self.gangs),
        }


@dataclass(slots=True)
class ClusterStatus:
    domains: list[DomainStatus]
    pending: Counter[str]
    pending_gangs: list[dict[str, str]]

    def to_data(self) -> dict[str, Any]:
        return {
            "domains": [d.to_data() for d in self.domains],
            "totals": {
                "nodes": sum(d.nodes for d in self.domains),
                "gpus": sum(d.gpus for d in self.domains),
                "usedGpus": sum(d.used for d in self.domains),
                "fits": {str(k): sum(d.fits()[k] for d in self.domains) for k in FIT_SIZES},
            },
            "pendingByReason": dict(sorted(self.pending.items())),
            "pending": self.pending_gangs,
        }

    def lines(self) -> list[str]:
        fit = "  ".join(f"{k:>3}-GPU" for k in FIT_SIZES)
        out = [f"{'DOMAIN':<28} {'NODES':>5} {'GPUS':>5} {'USED':>5} {'FREE':>5}  fits: {fit}  GANGS  UNHEALTHY"]
        for d in self.domains:
            fits = "  ".join(f"{v:>7}" for v in d.fits().values())
            sick = ", ".join(d.unhealthy[:3]) + (f" (+{len(d.unhealthy) - 3})" if len(d.unhealthy) > 3 else "")
            out.append(
                f"{d.name:<28} {d.nodes:>5} {d.gpus:>5} {d.used:>5} {d.gpus - d.used:>5}        {fits}  "
                f"{len(d.gangs):>5}  {sick or '-'}"
            )
        data = self.to_data()["totals"]
        out.append(
            f"{'total':<28} {data['nodes']:>5} {data['gpus']:>5} {data['usedGpus']:>5} "
            f"{data['gpus'] - data['usedGpus']:>5}        " + "  ".join(f"{v:>7}" for v in data["fits"].values())
        )
        if self.pending:
            out.append("Pending gangs by reason: " + ", ".join(f"{r} {n}" for r, n in sorted(self.pending.items())))
            out += [f"  {p['reason']:<30} {p['kind']} {p['name']}: {p['message']}" for p in self.pending_gangs]
        else:
            out.append("Pending gangs: none")
        return out


def cluster_status(cluster: LiveCluster) -> ClusterStatus:
    snapshot = cluster.snapshot
    probe = Request(1, _WORKER, intra_node=IntraNode.NVLINK)
    domains: dict[str, DomainStatus] = {}
    where: dict[str, str] = {}
    for i, node in enumerate(snapshot.nodes):
        name = snapshot.domains[i][0] if len(snapshot.tiers) else node.name
        d = domains.setdefault(name, DomainStatus(name))
        where[node.name] = name
        d.nodes += 1
        d.gpus += node.topology.gpu_count
        d.used += len(node.used_gpus & frozenset(range(node.topology.gpu_count)))
        d.unhealthy += [f.words() for f in node_faults(node)]
        if node.topology.gpu_count >= _WORKER and node_rejection(node, probe) is None:
            d.slots += node_offer(snapshot, node, _WORKER, IntraNode.NVLINK).capacity
    for gang in held_gangs(cluster):
        for name, _ in gang.workers:
            if name in where:
                domains[where[name]].gangs.add(gang.id)
    pending = waiting(cluster)
    return ClusterStatus(
        sorted(domains.values(), key=lambda d: d.name),
        Counter(str(r) for _, _, r, _ in pending),
        [{"kind": k, "name": n, "reason": str(r), "message": m} for k, n, r, m in pending],
    )
