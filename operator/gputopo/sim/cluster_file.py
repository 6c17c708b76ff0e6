"""The cluster snapshot and trace files as data (the CLI reads and writes the YAML/JSON).

Their schema is ``gputopo.api.clusterfile`` (also published as JSON Schema in ``schemas/``). What the schema
cannot say needs the node's topology: a known node type, a topology file that is there and parses, GPU
indices and links the node has, names that are unique. Every problem is a ``ClusterFileError`` whose message
names the field (``nodes[3].usedGpus[0]: ...``), so a caller only has to add the file's name.

Nodes naming the same node type or the same topology file (and GPU model) share one topology object, so
they fall into one node class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gputopo.api.clusterfile import ClusterFile, ClusterNode, TraceFile
from gputopo.api.nodetopology import GpuHealthState, LinkState
from gputopo.api.problems import one_line
from gputopo.errors import GputopoError
from gputopo.placement.constraints import Taint
from gputopo.placement.types import DEFAULT_TIERS, NodeInfo, Snapshot, TierConfig, TierLevel
from gputopo.sim.generate import TraceJob
from gputopo.topology.catalog import NODE_TYPES, load_node_type
from gputopo.topology.loader import load_topology
from gputopo.topology.model import Topology, TopologyError

__all__ = [
    "ClusterFileError",
    "parse_file",
    "snapshot_from_data",
    "snapshot_to_data",
    "trace_from_data",
    "trace_to_data",
]

M = TypeVar("M", bound=BaseModel)


class ClusterFileError(GputopoError, ValueError):
    """A cluster or trace file that cannot be used; the message starts with the field at fault."""


_Loaded = dict[tuple[Path, str], Topology]


def _base_topology(raw: ClusterNode, where: str, base: Path | None, loaded: _Loaded) -> Topology:
    if raw.type is not None:
        if raw.type not in NODE_TYPES:
            raise ClusterFileError(f"{where}.type: unknown node type {raw.type!r}; known: {', '.join(NODE_TYPES)}")
        return load_node_type(raw.type)
    assert raw.topology is not None
    path = Path(raw.topology)
    if not path.is_absolute() and base is not None:
        path = base / path
    model = raw.gpu_model or ""
    key = (path.resolve(), model)
    found = loaded.get(key)
    if found is None:
        if not path.is_file():
            raise ClusterFileError(f"{where}.topology: no topology file {path}")
        try:
            found = loaded[key] = load_topology(path, gpu_model=model or None)
        except (TopologyError, OSError, UnicodeDecodeError) as error:
            raise ClusterFileError(f"{where}.topology: {path}: {error}") from None
    return found


def _gpu(where: str, gpu: int, topology: Topology) -> int:
    if gpu >= topology.gpu_count:
        raise ClusterFileError(f"{where}: no GPU{gpu}; the node has GPUs 0..{topology.gpu_count - 1}")
    return gpu


def _node(raw: ClusterNode, where: str, base: Path | None, loaded: _Loaded) -> NodeInfo:
    topology = _base_topology(raw, where, base, loaded)
    for i, (a, b) in enumerate(raw.down_links):
        _gpu(f"{where}.downLinks[{i}][0]", a, topology)
        _gpu(f"{where}.downLinks[{i}][1]", b, topology)
        if a == b:
            raise ClusterFileError(f"{where}.downLinks[{i}]: a link joins two different GPUs, not GPU{a} and itself")
        topology = topology.with_link_state(a, b, LinkState.DOWN)
    for i, gpu in enumerate(raw.unhealthy_gpus):
        topology = topology.with_gpu_health(_gpu(f"{where}.unhealthyGpus[{i}]", gpu, topology),
                                            GpuHealthState.UNHEALTHY, "from cluster file")  # fmt: skip
    used = frozenset(_gpu(f"{where}.usedGpus[{i}]", g, topology) for i, g in enumerate(raw.used_gpus))
    return NodeInfo(
        name=raw.name,
        topology=topology,
        labels=dict(raw.labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in raw.taints),
        schedulable=raw.schedulable,
        ready=raw.ready,
        used_gpus=used,
        driver_version=raw.driver_version or topology.system.driver_version,
    )


def parse_file(model: type[M], data: Any, holds: str) -> M:
    """A cluster or trace file's data as its model; an empty file or a wrong field in one line."""
    if data is None:
        raise ClusterFileError(f"the file is empty; {holds}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ClusterFileError(one_line(error)) from None


def snapshot_from_data(data: Any, *, base: Path | None = None) -> Snapshot:
    """The snapshot a cluster file describes; relative topology paths are read from ``base``."""
    parsed = parse_file(ClusterFile, data, "a cluster file has nodes: [...]")
    tiers = DEFAULT_TIERS
    if parsed.tiers is not None:
        if not parsed.tiers:
            raise ClusterFileError("tiers: give at least one tier, or leave tiers out for the defaults")
        tiers = TierConfig(tuple(TierLevel(t.label, t.oversubscription) for t in parsed.tiers))
    seen: dict[str, int] = {}
    for i, raw in enumerate(parsed.nodes):
        if raw.name in seen:
            raise ClusterFileError(f"nodes[{i}].name: {raw.name!r} is already the name of nodes[{seen[raw.name]}]")
        seen[raw.name] = i
    loaded: _Loaded = {}
    return Snapshot((_node(raw, f"nodes[{i}]", base, loaded) for i, raw in enumerate(parsed.nodes)), tiers)


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


def trace_from_data(data: Any) -> list[TraceJob]:
    """The jobs of a trace file, in file order."""
    parsed = parse_file(TraceFile, data, "a trace file has jobs: [...]")
    return [TraceJob(j.name, j.arrival, j.duration, j.workers, j.gpus_per_worker, j.slice_size) for j in parsed.jobs]


def trace_to_data(trace: list[TraceJob]) -> dict[str, Any]:
    return {
        "jobs": [
            {"name": j.name, "arrival": j.arrival, "duration": j.duration, "workers": j.workers,
             "gpusPerWorker": j.gpus_per_worker, **({"sliceSize": j.slice_size} if j.slice_size else {})}
            for j in trace
        ]
    }  # fmt: skip
