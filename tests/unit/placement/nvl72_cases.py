"""NVL72 placement cases whose decisions are recorded in ``fixtures/nvl72_decisions.json``.

The record holds what the engine decided before the NVLink-domain planner was rewritten for large clusters
(f5ae149's planner, with the estimator of fd6ad62, which gives a Grace tray GPUDirect RDMA through NVLink-C2C);
``test_nvl72_decisions`` checks that every decision is still the same. Three kinds of case:

* ``named``: the snapshots and gangs of ``test_nvlink_domains``;
* ``random``: seeded NVL72 clusters (1 to 12 racks, random fill, faulty trays, cordoned and tainted trays,
  sometimes a few HGX nodes beside them) with a few gangs each, one after another on the snapshot each
  leaves (whole racks and beyond, slices, 1, 2 and 4-GPU workers, required and preferred tiers, the device
  plugin's choice);
* ``simulated``: ``bench_nvl72``'s two traces on its 8 racks, with and without the spare trays, every
  decision of the replay in order.

Record again (only when a decision is meant to change): ``python tests/unit/placement/nvl72_cases.py``.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gputopo.api.labels import LABEL_NVLINK_CLIQUE
from gputopo.api.nodetopology import FabricState, GpuHealthState, LinkState
from gputopo.api.trainingjob import IntraNode
from gputopo.placement import NodeInfo, Placement, Request, Snapshot, Taint, Unplaceable, place
from gputopo.placement.types import GpuChoice, TierConfig
from gputopo.sim.generate import generate_nvl72_cluster, generate_trace
from gputopo.sim.simulation import simulate
from gputopo.topology.catalog import GB200_TRAY, load_node_type
from gputopo.topology.fabric import health_mask, with_fabric
from gputopo.topology.model import Topology

FIXTURE = Path(__file__).parent / "fixtures" / "nvl72_decisions.json"
RANDOM_CLUSTERS = 400
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"

Decision = dict[str, Any]


def encode(result: Placement | Unplaceable) -> Decision:
    """A decision as plain data: every rank's node and GPUs, the figure and its bottleneck, or the refusal."""
    if isinstance(result, Unplaceable):
        return {"reason": result.reason, "details": list(result.details)}
    ranks = " ".join(f"{w.node}:{','.join(map(str, w.gpus))}" for w in result.workers)
    return {
        "ranks": hashlib.sha256(ranks.encode()).hexdigest()[:24],
        "racks": _rack_runs([w.node for w in result.workers]),
        "busbw": result.busbw_gbps,
        "bottleneck": result.bottleneck,
        "tier": result.tier,
        "tierDomain": result.tier_domain,
    }


def _rack_runs(nodes: list[str]) -> str:
    """Ranks per rack in rank order (``rack-01 x16, rack-03 x16``), for a reader of a difference."""
    runs: list[list[Any]] = []
    for name in nodes:
        rack = name.rsplit("-t", 1)[0]
        if runs and runs[-1][0] == rack:
            runs[-1][1] += 1
        else:
            runs.append([rack, 1])
    return ", ".join(f"{rack} x{count}" for rack, count in runs)


# -- named: the cases of test_nvlink_domains --------------------------------------------------------------


def _tray(rack: str, t: int, leaf: int, topology: Topology, used: frozenset[int] = frozenset()) -> NodeInfo:
    labels = {TIER0: f"leaf-{leaf}", TIER1: "spine-a"}
    return NodeInfo(f"{rack}-t{t:02d}", topology, labels, used_gpus=used, driver_version="570.133.20")


def _rack_topology(rack: str) -> Topology:
    return with_fabric(load_node_type(GB200_TRAY), str(uuid.uuid5(uuid.NAMESPACE_DNS, rack)), 1)


def _racks(count: int, trays: int = 18, used: dict[str, int] | None = None) -> list[NodeInfo]:
    out = []
    for r in range(count):
        topology = _rack_topology(f"r{r}")
        for t in range(trays):
            busy = frozenset(range(4)) if used and t < used.get(f"r{r}", 0) else frozenset()
            out.append(_tray(f"r{r}", t, r // 2, topology, busy))
    return out


def _snap(nodes: list[NodeInfo], cap: int | None = None) -> Snapshot:
    return Snapshot(nodes, TierConfig() if cap is None else TierConfig(domain_node_cap=cap))


def named_cases() -> Iterator[tuple[str, Snapshot, list[Request]]]:
    whole = ((24, None), (24, 8), (24, 12), (48, None), (12, None), (16, None), (18, None), (32, 16))
    for workers, size in whole:
        yield f"whole-trays-{workers}-slice-{size}", _snap(_racks(4)), [Request(workers, 4, slice_size=size)]
    yield "cap-18", _snap(_racks(2), cap=18), [Request(18, 4)]
    yield "cap-counts-trays-in-use", _snap(_racks(2, used={"r0": 10})), [Request(8, 4), Request(6, 4)]
    for workers, gpus in ((1, 4), (4, 1), (2, 2)):
        nodes = _racks(1, trays=6)
        nodes[:3] = [replace(n, used_gpus=frozenset({0, 1})) for n in nodes[:3]]
        yield f"never-split-a-tray-{workers}x{gpus}", _snap(nodes), [Request(workers, gpus)]
    yield "domains-in-use", _snap(_racks(3, used={"r1": 3})), [Request(1, 1), Request(2, 4), Request(1, 4)]
    nodes = _racks(2)
    nodes[20] = replace(nodes[20], used_gpus=frozenset({0}))
    yield "partly-used-tray", _snap(nodes), [Request(2, 1)]
    yield "contiguous-ranks", _snap(_racks(4)), [Request(24, 4, slice_size=8)]
    yield "one-domain-or-two", _snap(_racks(2)), [Request(4, 4)]
    yield "one-domain-or-two-cap-2", _snap(_racks(2), cap=2), [Request(4, 4)]
    lone = _tray("lone", 0, 9, _degraded(_rack_topology("r9")))
    yield "degraded-left-out", _snap([*_racks(1, trays=4), lone]), [Request(5, 4)]
    yield "refused-slices-of-8", _snap(_racks(3, used={"r0": 9, "r1": 11, "r2": 13})), [Request(24, 4, slice_size=8)]
    yield "refused-one-small-rack", _snap(_racks(1, trays=4)), [Request(8, 4)]
    for workers, gpus, cap in ((24, 4, 16), (4, 4, 2), (3, 1, 16), (40, 4, 16), (6, 2, 1)):
        yield f"figure-{workers}x{gpus}-cap-{cap}", _snap(_racks(4), cap=cap), [Request(workers, gpus)]


# -- random clusters ----------------------------------------------------------------------------------------


def _degraded(topology: Topology) -> Topology:
    gpus = tuple(
        replace(g, fabric=replace(g.fabric, health_mask=health_mask(degraded_bw=True))) if g.fabric else g
        for g in topology.gpus
    )
    return Topology(gpus, topology.links, topology.nics, topology.system)


def _fabric_down(topology: Topology) -> Topology:
    gpus = tuple(
        replace(g, fabric=replace(g.fabric, state=FabricState.IN_PROGRESS)) if g.fabric else g for g in topology.gpus
    )
    return Topology(gpus, topology.links, topology.nics, topology.system)


_FAULTS: dict[str, Callable[[Topology], Topology]] = {
    "degraded": _degraded,
    "fabric-down": _fabric_down,
    "gpu-unhealthy": lambda t: t.with_gpu_health(1, GpuHealthState.UNHEALTHY, "XID 79"),
    "link-down": lambda t: t.with_link_state(0, 1, LinkState.DOWN),
}


def random_cluster(rng: random.Random) -> tuple[Snapshot, dict[str, Any]]:
    """An NVL72 cluster in some state of use and repair, and what was drawn (for a reader of the record)."""
    racks = rng.choice([1, 2, 2, 3, 4, 4, 5, 6, 8, 10, 12])
    trays = rng.choice([18, 18, 18, 18, 9, 4])
    racks_per_leaf = rng.choice([1, 2, 2, 3])
    leaves_per_spine = rng.choice([1, 2, 4])
    cap = rng.choice([16, 16, 16, 16, 16, 18, 12, 4, 2])
    busy = rng.choice([0.0, 0.1, 0.3, 0.6, 0.85])
    fault_share = rng.choice([0.0, 0.0, 0.03, 0.1])
    labelled = rng.random() < 0.8
    tray = load_node_type(GB200_TRAY)
    nodes: list[NodeInfo] = []
    for r in range(racks):
        cluster_uuid = str(uuid.UUID(int=rng.getrandbits(128)))
        topology = with_fabric(tray, cluster_uuid, 1)
        rack_busy = min(1.0, busy * rng.choice([0.0, 0.5, 1.0, 1.5]))
        leaf = r // racks_per_leaf
        for t in range(trays):
            labels = {TIER0: f"leaf-{leaf}", TIER1: f"spine-{leaf // leaves_per_spine}"}
            if labelled:
                labels[LABEL_NVLINK_CLIQUE] = f"{cluster_uuid}.1"
            used: frozenset[int] = frozenset()
            if rng.random() < rack_busy:
                used = frozenset(range(4)) if rng.random() < 0.6 else frozenset(rng.sample(range(4), rng.randint(1, 3)))
            own = topology
            if rng.random() < fault_share:
                own = _FAULTS[rng.choice(sorted(_FAULTS))](topology)
            info = NodeInfo(f"rack-{r:02d}-tray-{t:02d}", own, labels, used_gpus=used, driver_version="570.133.20")
            roll = rng.random()
            if roll < fault_share / 2:
                info = replace(info, schedulable=False)
            elif roll < fault_share:
                info = replace(info, taints=(Taint("maintenance"),))
            nodes.append(info)
    hgx = rng.random() < 0.1
    if hgx:
        for i in range(rng.randint(1, 4)):
            labels = {TIER0: f"leaf-hgx-{i // 2}", TIER1: "spine-0"}
            nodes.append(NodeInfo(f"hgx-{i}", load_node_type("hgx-h100"), labels, driver_version="570.133.20"))
    drawn = {"racks": racks, "trays": trays, "racksPerLeaf": racks_per_leaf, "leavesPerSpine": leaves_per_spine,
             "cap": cap, "busy": busy, "faults": fault_share, "labelled": labelled, "hgx": hgx}  # fmt: skip
    return Snapshot(nodes, TierConfig(domain_node_cap=cap)), drawn


def random_request(rng: random.Random, snap: Snapshot) -> Request:
    per_worker = rng.choice([4, 4, 4, 2, 1])
    per_tray = 4 // per_worker
    free_trays = max(1, sum(1 for n in snap if not n.used_gpus))
    scale = rng.choice(["one-tray", "rack", "rack", "racks", "racks", "racks", "cluster"])
    if scale == "one-tray":
        workers = rng.randint(1, per_tray)
    elif scale == "rack":
        workers = rng.randint(2, min(18, free_trays + 1) * per_tray)
    elif scale == "racks":
        workers = rng.randint(min(17, free_trays) * per_tray, max(18, free_trays * 3 // 4) * per_tray)
    else:
        workers = rng.randint(max(1, free_trays * 3 // 4) * per_tray, free_trays * per_tray + 4)
    slice_size = None
    if rng.random() < 0.3 and workers > 1:
        divisors = [d for d in range(2, workers + 1) if workers % d == 0 and d <= 32]
        slice_size = rng.choice(divisors) if divisors and rng.random() < 0.9 else rng.randint(2, 9)
    required = rng.choice([None, None, None, None, None, 0, 1])
    preferred = rng.choice([None, None, None, 0, 1])
    intra = rng.choice([IntraNode.ANY] * 6 + [IntraNode.NVSWITCH, IntraNode.NVLINK])
    choice = GpuChoice.DEVICE_PLUGIN if rng.random() < 0.15 else GpuChoice.PLANNED
    same_model = rng.random() < 0.8
    return Request(workers, per_worker, intra_node=intra, required_tier=required, preferred_tier=preferred,
                   slice_size=slice_size, gpu_choice=choice, same_model=same_model)  # fmt: skip


def random_requests(seed: int) -> tuple[Snapshot, dict[str, Any], list[Request]]:
    rng = random.Random(seed)
    snap, drawn = random_cluster(rng)
    return snap, drawn, [random_request(rng, snap) for _ in range(rng.randint(1, 4))]


def decide_in_turn(snap: Snapshot, requests: list[Request]) -> list[Decision]:
    """Each gang on the snapshot the ones before it leave (placed gangs keep their GPUs)."""
    out = []
    for request in requests:
        result = place(snap, request)
        out.append(encode(result))
        if isinstance(result, Placement):
            snap = snap.reserve(result)
    return out


# -- bench_nvl72's replays ----------------------------------------------------------------------------------

SIMULATIONS = [("arrivals-240s", 240.0, 21), ("arrivals-160s", 160.0, 22)]


def simulated(name: str, interarrival: float, seed: int, cap: int) -> dict[str, Any]:
    """Every decision of the replay, hashed in order, and what each placed job got."""
    snap = generate_nvl72_cluster(8)
    tiers = TierConfig(snap.tiers.levels, snap.tiers.beyond_top, domain_node_cap=cap)
    trace = generate_trace(random.Random(seed), 500, mean_interarrival=interarrival, gpus_per_node=4, slice_share=0.3)
    digest = hashlib.sha256()
    calls = 0

    def recording(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
        nonlocal calls
        result = place(snapshot, request)
        digest.update(json.dumps(encode(result), sort_keys=True).encode())
        calls += 1
        return result

    report = simulate(Snapshot(snap.nodes, tiers), trace, "gputopo", recording, exact=False)
    jobs = [[o.job, o.wait, o.busbw_gbps, o.nodes, o.nvlink_domains] for o in report.outcomes]
    return {"calls": calls, "sha256": digest.hexdigest(), "jobs": jobs}


def record() -> dict[str, Any]:
    doc: dict[str, Any] = {"named": {}, "random": [], "simulated": {}}
    for name, snap, requests in named_cases():
        doc["named"][name] = decide_in_turn(snap, requests)
    for seed in range(RANDOM_CLUSTERS):
        snap, drawn, requests = random_requests(seed)
        doc["random"].append({"seed": seed, "cluster": drawn, "decisions": decide_in_turn(snap, requests)})
    for name, interarrival, seed in SIMULATIONS:
        for cap in (16, 18):
            doc["simulated"][f"{name}-cap{cap}"] = simulated(name, interarrival, seed, cap)
    return doc


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(record(), indent=0, separators=(",", ":")) + "\n")
    print(f"wrote {FIXTURE}")
