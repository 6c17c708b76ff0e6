"""Seeded generators of clusters and job traces for the simulator and the benchmarks."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from gputopo.api.labels import LABEL_NVLINK_CLIQUE
from gputopo.placement.types import DEFAULT_TIERS, NodeInfo, Snapshot, TierConfig
from gputopo.topology.catalog import GB200_TRAY, load_node_type
from gputopo.topology.fabric import with_fabric

__all__ = [
    "DEFAULT_MIX",
    "TraceJob",
    "generate_cluster",
    "generate_nvl72_cluster",
    "generate_trace",
    "job_shape",
]

DEFAULT_MIX: Mapping[str, float] = {
    "hgx-h100": 0.35,
    "dgx-a100": 0.2,
    "hgx-a100": 0.1,
    "h100-nvl-pairs": 0.15,
    "dgx1-v100": 0.1,
    "rtx4090-pcie": 0.1,
}


def generate_cluster(
    rng: random.Random,
    nodes: int,
    *,
    mix: Mapping[str, float] = DEFAULT_MIX,
    nodes_per_leaf: int = 16,
    leaves_per_spine: int = 4,
    used_share: float = 0.0,
    tiers: TierConfig = DEFAULT_TIERS,
) -> Snapshot:
    """Nodes of one type per leaf switch (racks are bought whole), leaves under spines; ``used_share``
    of GPUs taken at random so the cluster starts fragmented."""
    types = list(mix)
    weights = [mix[t] for t in types]
    infos: list[NodeInfo] = []
    leaf_type = ""
    for i in range(nodes):
        leaf = i // nodes_per_leaf
        if i % nodes_per_leaf == 0:
            leaf_type = rng.choices(types, weights)[0]
        topology = load_node_type(leaf_type)
        used = frozenset(g for g in range(topology.gpu_count) if rng.random() < used_share)
        labels = {
            tiers.levels[0].label: f"leaf-{leaf}",
            tiers.levels[-1].label: f"spine-{leaf // leaves_per_spine}",
            "node.kubernetes.io/instance-type": leaf_type,
        }
        infos.append(
            NodeInfo(f"{leaf_type}-{i:05d}", topology, labels, used_gpus=used,
                     driver_version=topology.system.driver_version)
        )  # fmt: skip
    return Snapshot(infos, tiers)


def generate_nvl72_cluster(
    racks: int,
    *,
    trays_per_rack: int = 18,
    racks_per_leaf: int = 2,
    leaves_per_spine: int = 4,
    tiers: TierConfig = DEFAULT_TIERS,
) -> Snapshot:
    """GB200 NVL72 racks: ``trays_per_rack`` trays per rack, each rack one multi-node NVLink domain (its
    trays' GPUs report the rack's clique, and so does their ``gputopo.io/nvlink.clique`` label), racks under
    leaf switches, leaves under spines. Every GPU free."""
    tray = load_node_type(GB200_TRAY)
    infos: list[NodeInfo] = []
    for r in range(racks):
        cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputopo-nvl72/rack-{r:03d}"))
        topology = with_fabric(tray, cluster_uuid, 1)
        leaf = r // racks_per_leaf
        for t in range(trays_per_rack):
            labels = {
                tiers.levels[0].label: f"leaf-{leaf}",
                tiers.levels[-1].label: f"spine-{leaf // leaves_per_spine}",
                "node.kubernetes.io/instance-type": GB200_TRAY,
                LABEL_NVLINK_CLIQUE: f"{cluster_uuid}.1",
            }
            infos.append(NodeInfo(f"rack-{r:03d}-tray-{t:02d}", topology, labels))
    return Snapshot(infos, tiers)


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str
    arrival: float
    duration: float
    workers: int
    gpus_per_worker: int
    slice_size: int | None = None  # ranks that must share an NVLink domain (spec.topology.sliceSize)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


def job_shape(gpus: int, gpus_per_node: int = 8) -> tuple[int, int]:
    """(workers, gpus per worker): up to a node in one worker, whole nodes beyond."""
    n = gpus_per_node
    return (1, gpus) if gpus <= n else ((gpus + n - 1) // n, n)


_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SIZE_WEIGHTS = (10, 12, 14, 16, 10, 7, 4, 2, 1)


def generate_trace(
    rng: random.Random,
    jobs: int,
    *,
    mean_interarrival: float = 60.0,
    mean_duration: float = 3600.0,
    max_gpus: int = 256,
    gpus_per_node: int = 8,
    slice_share: float = 0.0,
    slice_gpus: int = 32,
) -> list[TraceJob]:
    """Poisson arrivals, log-normal durations, sizes 1-256 GPUs weighted towards small jobs. ``slice_share``
    of the jobs larger than ``slice_gpus`` ask that each ``slice_gpus`` GPUs (a tensor-parallel group) share
    an NVLink domain."""
    sizes = [s for s in _SIZES if s <= max_gpus]
    weights = _SIZE_WEIGHTS[: len(sizes)]
    t = 0.0
    out = []
    for j in range(jobs):
        t += rng.expovariate(1 / mean_interarrival)
        gpus = rng.choices(sizes, weights)[0]
        workers, k = job_shape(gpus, gpus_per_node)
        duration = rng.lognormvariate(0, 0.8) * mean_duration
        slice_ranks = slice_gpus // k
        sliced = gpus > slice_gpus and slice_ranks > 1 and workers % slice_ranks == 0 and rng.random() < slice_share
        out.append(
            TraceJob(f"job-{j:05d}", round(t, 3), round(duration, 3), workers, k, slice_ranks if sliced else None)
        )
    return out
