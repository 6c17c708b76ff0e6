"""A probe farm: many fake probes in one process, for large sandboxes (1,000 nodes, not 1,000 processes).

Nodes are built one after another while the first ones already poll and publish, so the first
NodeTopology objects appear within seconds. Only the fault directory is re-read while running.
"""

from __future__ import annotations

import argparse
import functools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from gputopo.topology.fabric import with_fabric
from gputopo.topology.model import Topology
from gputopo_probe.errors import ProbeError
from gputopo_probe.fake.allocation import AllocationMode, FakeAllocator
from gputopo_probe.fake.dra import FakeDraDriver
from gputopo_probe.fake.faults import FaultStore
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.fake.podwatch import PodWatch
from gputopo_probe.nvml import Nvml
from gputopo_probe.probe import Probe
from gputopo_probe.publish.kube import Kube, load_api_client
from gputopo_probe.publish.publisher import KubeWriter, Publisher
from gputopo_probe.publish.server import Metrics
from gputopo_probe.runner import Member, Runner
from gputopo_probe.source import load_fake_topology

__all__ = ["FarmNode", "build_member", "farm_topology", "read_nodes_file", "run_farm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FarmNode:
    node: str
    topology: str
    gpu_model: str | None = None
    fabric: tuple[str, int] | None = None  # (cluster UUID, clique id) of the node's NVLink domain

    @property
    def key(self) -> tuple[str, str | None, tuple[str, int] | None]:
        """Nodes with equal keys share one topology object."""
        return self.topology, self.gpu_model, self.fabric


def _fabric(raw: object) -> tuple[str, int] | None:
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise TypeError(f"fabric must be a mapping, not {raw!r}")
    return str(raw["clusterUuid"]), int(raw.get("cliqueId", 0))


def read_nodes_file(path: str | Path) -> list[FarmNode]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        return [
            FarmNode(str(n["node"]), str(n["topology"]), n.get("gpuModel") or None, _fabric(n.get("fabric")))
            for n in data.get("nodes", [])
        ]
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as error:
        raise ProbeError(f"bad nodes file {path}: {error}") from error


def farm_topology(spec: FarmNode) -> Topology:
    """The node's fake topology: its source, with the GPUs in its NVLink domain when it has one."""
    topology = load_fake_topology(spec.topology, spec.gpu_model)
    return with_fabric(topology, *spec.fabric) if spec.fabric else topology


def build_member(
    spec: FarmNode,
    topology: Topology,
    *,
    kube: KubeWriter | None,
    faults: FaultStore | None,
    allocator: FakeAllocator | None,
    down_after: int,
    up_after: int,
    heartbeat_s: float,
    dra: bool = False,
) -> Member:
    fake = FakeNode(spec.node, topology, faults=faults)
    probe = Probe(
        Nvml(fake.nvml),
        fake.reader(),
        down_after=down_after,
        up_after=up_after,
        xid_thread=False,  # a thousand event threads would be absurd: events are drained each poll
        before_poll=fake.sync_faults,
        quiet=fake.quiet,
        pods=allocator.pods if allocator else None,
    )
    original_close = probe.close

    def close() -> None:
        original_close()
        fake.close()

    probe.close = close  # type: ignore[method-assign]
    driver = FakeDraDriver(kube) if dra and isinstance(kube, Kube) else None
    publisher = Publisher(kube, spec.node, heartbeat_s=heartbeat_s, driver=driver) if kube else None
    return Member(spec.node, probe, publisher)


def run_farm(args: argparse.Namespace) -> int:
    from gputopo_probe.service import serve

    specs = read_nodes_file(args.nodes_file)
    kube = Kube(load_api_client(args.kubeconfig))
    faults = FaultStore(args.fault_dir) if args.fault_dir else None
    mode: AllocationMode = args.fake_allocation
    topologies: dict[tuple[str, str | None, tuple[str, int] | None], Topology] = {}
    allocators: dict[str, FakeAllocator] = {}
    for spec in specs:
        if spec.key not in topologies:
            topologies[spec.key] = farm_topology(spec)
        unhealthy = functools.partial(faults.xid_gpus, spec.node) if faults else frozenset
        allocators[spec.node] = FakeAllocator(topologies[spec.key], mode, unhealthy)
    runner = Runner(args.interval or 1.0, Metrics(), publish_workers=8, confirm_s=args.confirm_interval)
    watch = PodWatch(kube, allocators).start()

    def build() -> None:
        for spec in specs:
            try:
                runner.add(
                    build_member(
                        spec,
                        topologies[spec.key],
                        kube=kube,
                        faults=faults,
                        allocator=allocators[spec.node],
                        down_after=args.down_after,
                        up_after=args.up_after,
                        heartbeat_s=args.heartbeat,
                        dra=bool(getattr(args, "dra", False)),
                    )
                )
            except ProbeError as error:
                log.error("node %s: not started: %s", spec.node, error)

    threading.Thread(target=build, name="farm-build", daemon=True).start()
    log.info("probe farm: %d nodes, interval %.1fs", len(specs), runner.interval_s)
    try:
        return serve(runner, args.listen)
    finally:
        watch.stop()
