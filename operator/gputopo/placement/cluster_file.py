"""The cluster snapshot and trace file formats (plain data; the CLI reads and writes the YAML/JSON).

A cluster file::

    tiers: [{label: fabric.topograph.run/tier-0, oversubscription: 1.0}, ...]   # optional
    nodes:
      - name: gpu-001
        type: hgx-h100                 # a node type of gputopo.topology.catalog, or instead:
        # topology: nodes/gpu-001.txt  # nvidia-smi topo -m output or NodeTopology YAML (relative to the file)
        # gpuModel: NVIDIA H100 80GB HBM3   # names the GPUs of an nvidia-smi topology
        labels: {fabric.topograph.run/tier-0: leaf-1}
        usedGpus: [0, 1]
        taints: [{key: k, value: v, effect: NoSchedule}]
        ready: true
        schedulable: true
        driverVersion: "570.133.20"    # default: the node type's
        downLinks: [[0, 1]]            # link health
        unhealthyGpus: [3]

Nodes naming the same node type or the same topology file (and GPU model) share one topology object, so
they fall into one node class.

A trace file: ``jobs: [{name, arrival, duration, workers, gpusPerWorker}]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gputopo.api.nodetopology import GpuHealthState, LinkState
from gputopo.placement.constraints import Taint
from gputopo.placement.generate import TraceJob
from gputopo.placement.types import DEFAULT_TIERS, NodeInfo, Snapshot, TierConfig, TierLevel
from gputopo.topology.catalog import load_node_type
from gputopo.topology.loader import load_topology
from gputopo.topology.model import Topology, TopologyError

__all__ = ["snapshot_from_data", "snapshot_to_data", "trace_from_data", "trace_to_data"]


_Loaded = dict[tuple[Path, str], Topology]


def _base_topology(raw: Mapping[str, Any], base: Path | None, loaded: _Loaded) -> Topology:
    name = str(raw.get("name", "?"))
    if raw.get("topology") and raw.get("type"):
        raise TopologyError(f"node {name}: give either type or topology, not both")
    if raw.get("type"):
        return load_node_type(str(raw["type"]))
    if not raw.get("topology"):
        raise TopologyError(f"node {name}: needs a type (a node type name) or a topology (a file)")
    path = Path(str(raw["topology"]))
    if not path.is_absolute() and base is not None:
        path = base / path
    model = str(raw.get("gpuModel") or "")
    key = (path.resolve(), model)
    found = loaded.get(key)
    if found is None:
        if not path.is_file():
            raise TopologyError(f"node {name}: no topology file {path}")
        found = loaded[key] = load_topology(path, gpu_model=model or None)
    return found


def _node(raw: Mapping[str, Any], base: Path | None, loaded: _Loaded) -> NodeInfo:
    topology = _base_topology(raw, base, loaded)
    for a, b in raw.get("downLinks") or ():
        topology = topology.with_link_state(int(a), int(b), LinkState.DOWN)
    for gpu in raw.get("unhealthyGpus") or ():
        topology = topology.with_gpu_health(int(gpu), GpuHealthState.UNHEALTHY, "from cluster file")
    return NodeInfo(
        name=str(raw["name"]),
        topology=topology,
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        taints=tuple(Taint.from_dict(t) for t in raw.get("taints") or ()),
        schedulable=bool(raw.get("schedulable", True)),
        ready=bool(raw.get("ready", True)),
        used_gpus=frozenset(int(g) for g in raw.get("usedGpus") or ()),
        driver_version=str(raw.get("driverVersion") or topology.system.driver_version),
    )


def snapshot_from_data(data: Mapping[str, Any], *, base: Path | None = None) -> Snapshot:
    """The snapshot a cluster file describes; relative topology paths are read from ``base``."""
    tiers = DEFAULT_TIERS
    if data.get("tiers"):
        tiers = TierConfig(
            tuple(TierLevel(str(t["label"]), float(t.get("oversubscription", 1.0))) for t in data["tiers"])
        )
    loaded: _Loaded = {}
    return Snapshot((_node(n, base, loaded) for n in data.get("nodes") or ()), tiers)


def snapshot_to_data(snapshot: Snapshot) -> dict[str, Any]:
    """Nodes must carry their node type in the ``node.kubernetes.io/instance-type`` label."""
    return {
        "tiers": [{"label": t.label, "oversubscription": t.oversubscription} for t in snapshot.tiers.levels],
        "nodes": [
            {
                "name": n.name,
                "type": n.labels.get("node.kubernetes.io/instance-type", ""),
                "labels": dict(n.labels),
                "usedGpus": sorted(n.used_gpus),
            }
            for n in snapshot
        ],
    }


def trace_from_data(data: Mapping[str, Any]) -> list[TraceJob]:
    return [
        TraceJob(str(j["name"]), float(j["arrival"]), float(j["duration"]), int(j.get("workers", 1)),
                 int(j["gpusPerWorker"]), int(j["sliceSize"]) if j.get("sliceSize") else None)
        for j in data.get("jobs") or ()
    ]  # fmt: skip


def trace_to_data(trace: list[TraceJob]) -> dict[str, Any]:
    return {
        "jobs": [
            {"name": j.name, "arrival": j.arrival, "duration": j.duration, "workers": j.workers,
             "gpusPerWorker": j.gpus_per_worker, **({"sliceSize": j.slice_size} if j.slice_size else {})}
            for j in trace
        ]
    }  # fmt: skip
