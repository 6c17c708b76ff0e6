"""Flap damping for new plans: a part seen failing is avoided for a while, even after it comes back.

The probe already debounces single bad readings; this keeps a link that goes down and up every half
second from attracting the next plan each time it reads Up. A job's own placement is judged on what the
topology says now (see ``failure``); only new plans read the quarantined view.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gputopo.api.nodetopology import FabricHealth, GpuHealthState, LinkState, NicState
from gputopo.topology.fabric import fabric_health, health_mask
from gputopo.topology.model import Topology

__all__ = ["Part", "Quarantine"]

# ("link", a, b) | ("gpu", index, -1) | ("nic", name, -1) | ("fabric", gpu index, -1)
Part = tuple[str, int | str, int]


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
            parts.add(("link", a, b))
    for gpu in topology.gpus:
        if gpu.health is GpuHealthState.UNHEALTHY:
            parts.add(("gpu", gpu.index, -1))
        if fabric_health(gpu.fabric)[0] is not FabricHealth.HEALTHY:
            parts.add(("fabric", gpu.index, -1))
    for nic in topology.nics:
        if nic.state is NicState.DOWN:
            parts.add(("nic", nic.name, -1))
    return parts


@dataclass
class Quarantine:
    seconds: float
    _last_seen: dict[str, dict[Part, datetime]] = field(default_factory=dict)
    _failing: dict[str, set[Part]] = field(default_factory=dict)
    _masked: dict[tuple[str, int, frozenset[Part]], tuple[Topology, Topology]] = field(default_factory=dict)

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
        """The topology with every recently failing part shown failed (cached per topology object)."""
        parts = self.parts(node, now) - failing_parts(topology)
        if not parts:
            return topology
        key = (node, id(topology), parts)
        cached = self._masked.get(key)
        if cached is not None and cached[0] is topology:  # an id can be reused once freed
            return cached[1]
        masked = topology
        for kind, x, y in sorted(parts, key=str):
            if kind == "link" and isinstance(x, int) and (x, y) in masked.links:
                masked = masked.with_link_state(x, y, LinkState.DOWN)
            elif kind == "gpu" and isinstance(x, int) and x < masked.gpu_count:
                masked = masked.with_gpu_health(x, GpuHealthState.UNHEALTHY, "quarantined after a recent fault")
            elif kind == "nic" and isinstance(x, str):
                masked = masked.with_nic_state(x, NicState.DOWN)
            elif kind == "fabric" and isinstance(x, int) and x < masked.gpu_count:
                masked = _fabric_degraded(masked, x)
        if len(self._masked) > 4096:
            self._masked.clear()
        self._masked[key] = (topology, masked)
        return masked
