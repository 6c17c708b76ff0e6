"""NodeTopology objects into the facts the operator indexes: the pure model plus the pods' real GPUs.

``topology_from_status`` is the inverse of the probe's status builder. It reads tolerantly: a GPU pair
the probe did not report is taken as SYS (the farthest PCIe level), a link to a GPU that is not listed is
dropped, so a partial status still gives a usable model; a status that cannot give one gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gputopo.api.nodetopology import LinkKind, NodeTopologyStatus
from gputopo.controller.facts import TopologyFacts
from gputopo.topology.model import Gpu, Link, Nic, SystemFacts, Topology, TopologyError

__all__ = ["topology_facts", "topology_from_status"]


def topology_from_status(status: NodeTopologyStatus) -> Topology:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=g.uuid,
            model=g.model,
            architecture=g.architecture,
            memory_mib=g.memory_mi_b,
            pci_bus_id=g.pci_bus_id,
            numa_node=g.numa_node,
            pcie_generation=g.pcie.generation,
            pcie_width=g.pcie.width,
            nvlink_version=g.nvlink.version,
            health=g.health.state,
            health_reason=g.health.reason or (f"XID {g.health.xid}" if g.health.xid else ""),
        )
        for i, g in enumerate(sorted(status.gpus, key=lambda g: g.index))
    )
    if [g.index for g in sorted(status.gpus, key=lambda g: g.index)] != list(range(len(gpus))):
        raise TopologyError("GPU indices are not 0..n-1")
    n = len(gpus)
    links: dict[tuple[int, int], Link] = {}
    for raw in status.links:
        a, b = sorted((raw.a, raw.b))
        if a != b and b < n:
            links[(a, b)] = Link(a, b, raw.kind, raw.nvlinks, raw.state)
    for a in range(n):
        for b in range(a + 1, n):
            links.setdefault((a, b), Link(a, b, LinkKind.SYS))
    nics = []
    for raw_nic in status.nics:
        affinity = dict.fromkeys(range(n), LinkKind.SYS)
        for entry in raw_nic.gpu_affinity:
            if entry.gpu < n:
                affinity[entry.gpu] = entry.kind
        nics.append(
            Nic(
                name=raw_nic.name,
                link_layer=raw_nic.link_layer,
                state=raw_nic.state,
                rate_gbps=raw_nic.rate_gbps,
                numa_node=raw_nic.numa_node,
                pci_bus_id=raw_nic.pci_bus_id,
                affinity=tuple(affinity[i] for i in range(n)) if n else (),
            )
        )
    system = SystemFacts(
        driver_version=status.system.driver_version,
        cuda_driver_version=status.system.cuda_driver_version,
        nvswitch=status.system.nvswitch,
        gpudirect_rdma=status.system.gpu_direct_rdma,
    )
    return Topology(gpus, links, tuple(nics), system)


def topology_facts(body: Mapping[str, Any]) -> TopologyFacts:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = str((meta or {}).get("name", ""))
    raw = body.get("status")
    try:
        status = NodeTopologyStatus.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as exc:
        return TopologyFacts(name, None, (), f"status does not parse: {exc.error_count()} errors")
    try:
        topology = topology_from_status(status) if status.gpus else None
    except (TopologyError, ValueError) as exc:
        return TopologyFacts(name, None, tuple(status.pods), str(exc), status.observed_at)
    return TopologyFacts(name, topology, tuple(status.pods), observed_at=status.observed_at)
