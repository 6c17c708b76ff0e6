"""Flap damping for new plans: a part seen failing is avoided for a while, even after it comes back.

The probe already debounces single bad readings; this keeps a link that goes down and up every half
second from attracting the next plan each time it reads Up. A job's own placement is judged on what the
topology says now (see ``failure``); only new plans read the quarantined view. The pass observes each
NodeTopology reading the watch recorded, on the pass's own ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final

from gputopo.api.nodetopology import FabricHealth, GpuHealthState, LinkState, NicState
from gputopo.topology.fabric import fabric_health, health_mask
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology

__all__ = ["FabricPart", "GpuPart", "LinkPart", "NicPart", "Part", "Quarantine", "failing_parts"]


@dataclass(frozen=True, slots=True)
class LinkPart:
    """The link between GPUs ``a`` and ``b`` (a < b) is not Up."""

    a: int
    b: int

    def fail(self, topology: Topology) -> Topology:
        if (self.a, self.b) not in topology.links:
            return topology
        return topology.with_link_state(self.a, self.b, LinkState.DOWN)


@dataclass(frozen=True, slots=True)
class GpuPart:
    """GPU ``index`` is unhealthy."""

    index: int

    def fail(self, topology: Topology) -> Topology:
        if self.index >= topology.gpu_count:
            return topology
        return topology.with_gpu_health(self.index, GpuHealthState.UNHEALTHY, "quarantined after a recent fault")


@dataclass(frozen=True, slots=True)
class FabricPart:
    """GPU ``index``'s NVLink fabric is not healthy."""

    index: int

    def fail(self, topology: Topology) -> Topology:
        return _fabric_degraded(topology, self.index) if self.index < topology.gpu_count else topology


@dataclass(frozen=True, slots=True)
class NicPart:
    """NIC ``name`` is down."""

    name: str

    def fail(self, topology: Topology) -> Topology:
        return topology.with_nic_state(self.name, NicState.DOWN)


Part = LinkPart | GpuPart | FabricPart | NicPart

# A node's topology with recently failing parts shown failed, kept in the topology's own memo: the same masked
# model object comes back pass after pass, and with it what the planner worked out for it.
_MASKED: Final[Table[frozenset[Part], Topology]] = Table("quarantine masks")


def _fabric_degraded(topology: Topology, index: int) -> Topology:
    """The topology with GPU ``index``'s NVLink fabric reading degraded bandwidth (kept out of NVLink domains)."""
    gpu = topology.gpus[index]
    if gpu.fabric is None:
        return topology
    fabric = replace(gpu.fabric, health_mask=health_mask(degraded_bw=True))
    gpus = tuple(replace(g, fabric=fabric) if g.index == index else g for g in topology.gpus)
    return Topology(gpus, topology.links, topology.nics, topology.system)


def failing_parts(topology: Topology) -> set[Part]:
    parts: set[Part] = set()
    for (a, b), link in topology.links.items():
        if link.state is not LinkState.UP:
            parts.add(LinkPart(a, b))
    for gpu in topology.gpus:
        if gpu.health is GpuHealthState.UNHEALTHY:
            parts.add(GpuPart(gpu.index))
        if fabric_health(gpu.fabric)[0] is not FabricHealth.HEALTHY:
            parts.add(FabricPart(gpu.index))
    for nic in topology.nics:
        if nic.state is NicState.DOWN:
            parts.add(NicPart(nic.name))
    return parts


@dataclass
class Quarantine:
    seconds: float
    _last_seen: dict[str, dict[Part, datetime]] = field(default_factory=dict)
    _failing: dict[str, set[Part]] = field(default_factory=dict)

    def observe(self, node: str, topology: Topology, now: datetime) -> None:
        """Record the parts failing in this reading of the node."""
        if self.seconds <= 0:
            return
        seen = self._last_seen.setdefault(node, {})
        failing = failing_parts(topology)
        # A part that was failing until this reading was last seen failing now, not when it went down.
        for part in failing | self._failing.get(node, set()):
            seen[part] = now
        self._failing[node] = failing
        horizon = now - timedelta(seconds=self.seconds)
        for part in [p for p, t in seen.items() if t < horizon]:
            del seen[part]
        if not seen:
            self._last_seen.pop(node, None)

    def forget(self, node: str) -> None:
        self._last_seen.pop(node, None)
        self._failing.pop(node, None)

    def parts(self, node: str, now: datetime) -> frozenset[Part]:
        horizon = now - timedelta(seconds=self.seconds)
        return frozenset(p for p, t in self._last_seen.get(node, {}).items() if t >= horizon)

    def until(self, node: str) -> datetime | None:
        """When the node's last quarantined part is released."""
        seen = self._last_seen.get(node)
        return max(seen.values()) + timedelta(seconds=self.seconds) if seen else None

    def mask(self, node: str, topology: Topology, now: datetime) -> Topology:
        """The topology with every recently failing part shown failed (kept in the topology's memo)."""
        parts = self.parts(node, now) - failing_parts(topology)
        if not parts:
            return topology
        masks = topology.memo.table(_MASKED)
        masked = masks.get(parts)
        if masked is None:
            masked = topology
            for part in sorted(parts, key=repr):
                masked = part.fail(masked)
            masks[parts] = masked
        return masked
