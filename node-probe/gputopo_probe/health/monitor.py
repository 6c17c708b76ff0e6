"""The health monitor: readings and XID events through hysteresis into the node's current topology."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from gputopo.api.nodetopology import FabricHealth, GpuHealthState, LinkKind, LinkState, NicState
from gputopo.topology.fabric import fabric_health
from gputopo.topology.model import Fabric, Topology
from gputopo_probe.discovery.inventory import Inventory
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.errors import NvmlError
from gputopo_probe.health.hysteresis import Hysteresis
from gputopo_probe.health.readings import GpuReading, Readings, link_reading, read_health
from gputopo_probe.health.xid import XidWatcher, xid_is_fatal
from gputopo_probe.nvml import Nvml

__all__ = ["GpuDetail", "HealthMonitor", "HealthView", "Transition"]

_LINK_SEVERITY: Final = {LinkState.UP: 0, LinkState.DEGRADED: 1, LinkState.DOWN: 2}
_NIC_SEVERITY: Final = {NicState.UP: 0, NicState.DOWN: 1}
_GPU_SEVERITY: Final = {GpuHealthState.HEALTHY: 0, GpuHealthState.DEGRADED: 1, GpuHealthState.UNHEALTHY: 2}


@dataclass(frozen=True, slots=True)
class Transition:
    """A published health change: ``subject`` is ``link 0-1``, ``nic mlx5_0`` or ``gpu 3``."""

    subject: str
    old: str
    new: str
    reason: str = ""

    @property
    def worse(self) -> bool:
        return self.new in ("Down", "Degraded", "Unhealthy")


@dataclass(frozen=True, slots=True)
class GpuDetail:
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    xid: int | None = None
    active_links: int = 0


@dataclass
class HealthView:
    topology: Topology
    details: list[GpuDetail] = field(default_factory=list)


def _gpu_reading(reading: GpuReading, xid: int | None) -> tuple[GpuHealthState, str]:
    if reading.lost:
        return GpuHealthState.UNHEALTHY, "GPU is lost (fallen off the bus or needs a reset)"
    if xid is not None:
        return GpuHealthState.UNHEALTHY, f"XID {xid}"
    if reading.uncorrected_ecc > 0:
        return GpuHealthState.UNHEALTHY, f"{reading.uncorrected_ecc} uncorrected ECC errors"
    fabric, why = fabric_health(reading.fabric)
    if fabric is not FabricHealth.HEALTHY:  # the GPU still computes, but not at its NVLink domain's bandwidth
        return GpuHealthState.DEGRADED, why
    if reading.slowdown:
        return GpuHealthState.DEGRADED, "clocks slowed: " + ",".join(reading.throttle_reasons)
    return GpuHealthState.HEALTHY, ""


class HealthMonitor:
    def __init__(
        self,
        nvml: Nvml,
        sysfs: Sysfs,
        inventory: Inventory,
        *,
        down_after: int = 2,
        up_after: int = 2,
        xid_thread: bool = True,
    ) -> None:
        self.nvml, self.sysfs, self.inventory = nvml, sysfs, inventory
        self.links: Hysteresis[tuple[int, int], LinkState] = Hysteresis(
            _LINK_SEVERITY, down_after=down_after, up_after=up_after
        )
        self.nics: Hysteresis[str, NicState] = Hysteresis(_NIC_SEVERITY, down_after=down_after, up_after=up_after)
        self.gpus: Hysteresis[int, GpuHealthState] = Hysteresis(_GPU_SEVERITY, down_after=down_after, up_after=up_after)
        self.xids = XidWatcher(nvml, inventory.handles)
        if xid_thread:
            self.xids.start()
        self.latched: dict[int, int] = {}
        self.last_xid: dict[int, int] = {}
        self._action_seen: set[int] = set()
        self._errors: dict[int, int] = {}
        self._link_errors: dict[tuple[int, int], int] = {}
        self._reasons: dict[int, str] = {}
        self._fabrics: dict[int, Fabric | None] = {}  # the fabric reading behind each GPU's confirmed state
        self.view = HealthView(inventory.topology)
        # Some link, NIC or GPU read worse than its state and is not confirmed yet. Set by each poll (only a
        # poll changes the hysteresis), so the runner asks every node each tick without scanning its tracks.
        self.confirming = False

    def close(self) -> None:
        self.xids.stop()

    @property
    def settled(self) -> bool:
        return self.links.settled and self.nics.settled and self.gpus.settled

    def _erroring_links(self, gpu: int, reading: GpuReading) -> set[int]:
        """Links of ``gpu`` whose replay/recovery counters rose; per-link counters are read only on a rise."""
        before = self._errors.get(gpu)
        self._errors[gpu] = reading.link_errors
        if before is None or reading.link_errors <= before:
            return set()
        rising = set()
        handle = self.inventory.handles[gpu]
        for port in self.inventory.ports[gpu]:
            try:
                count = sum(
                    int(self.nvml.call("nvmlDeviceGetNvLinkErrorCounter", handle, port.link, c)) for c in (0, 1)
                )
            except NvmlError:
                continue
            if count > self._link_errors.get((gpu, port.link), 0):
                rising.add(port.link)
            self._link_errors[(gpu, port.link)] = count
        return rising

    def poll(self) -> list[Transition]:
        inv = self.inventory
        readings: Readings = read_health(self.nvml, self.sysfs, inv)
        out: list[Transition] = []
        for gpu, xid in self.xids.drain():
            self.last_xid[gpu] = xid
            if xid_is_fatal(xid):
                self.latched[gpu] = xid
                self._action_seen.discard(gpu)
        for gpu in self.xids.lost:
            readings.gpus[gpu] = GpuReading(lost=True)
        gpus = list(inv.topology.gpus)
        details: list[GpuDetail] = []
        erroring: dict[int, set[int]] = {}
        for gpu, reading in enumerate(readings.gpus):
            action = reading.recovery_action
            if gpu in self.latched and action is not None:
                if action != 0:
                    self._action_seen.add(gpu)
                elif gpu in self._action_seen:  # the driver says the GPU was reset: the XID is over
                    del self.latched[gpu]
                    self._action_seen.discard(gpu)
            erroring[gpu] = self._erroring_links(gpu, reading) if not reading.lost else set()
            state, reason = _gpu_reading(reading, self.latched.get(gpu))
            old = self.gpus.state(gpu)
            forced = reading.lost or gpu in self.latched
            changed = self.gpus.force(gpu, state) if forced else self.gpus.observe(gpu, state)[1]
            if changed and old is not None:
                out.append(Transition(f"gpu {gpu}", old.value, state.value, reason))
            current = self.gpus.state(gpu) or state
            if current is state:
                self._reasons[gpu] = reason
                if not reading.lost:
                    self._fabrics[gpu] = reading.fabric
            reason_now = self._reasons.get(gpu, "")
            fabric_now = self._fabrics.get(gpu, gpus[gpu].fabric)
            if (
                gpus[gpu].health is not current
                or gpus[gpu].health_reason != reason_now
                or gpus[gpu].fabric != fabric_now
            ):
                gpus[gpu] = replace(gpus[gpu], health=current, health_reason=reason_now, fabric=fabric_now)
            details.append(
                GpuDetail(reading.temperature_c, reading.throttle_reasons, self.last_xid.get(gpu), reading.active_links)
            )
        topology = Topology(tuple(gpus), inv.topology.links, inv.topology.nics, inv.topology.system)
        for (a, b), link in inv.topology.links.items():
            link_state = link_reading(inv, readings, a, b)
            if link_state is LinkState.UP and link.kind is LinkKind.NVLINK:
                ports = {p.link for p in inv.ports[a] if p.peer == b}
                if ports & erroring.get(a, set()):
                    link_state = LinkState.DEGRADED
            old_link = self.links.state((a, b))
            current_link, changed = self.links.observe((a, b), link_state)
            if changed and old_link is not None:
                out.append(Transition(f"link {a}-{b}", old_link.value, current_link.value))
            if current_link is not link.state:
                topology = topology.with_link_state(a, b, current_link)
        for nic in inv.topology.nics:
            nic_state = readings.nics.get(nic.name, NicState.DOWN)
            old_nic = self.nics.state(nic.name)
            current_nic, changed = self.nics.observe(nic.name, nic_state)
            if changed and old_nic is not None:
                out.append(Transition(f"nic {nic.name}", old_nic.value, current_nic.value))
            if current_nic is not nic.state:
                topology = topology.with_nic_state(nic.name, current_nic)
        self.view = HealthView(topology, details)
        self.confirming = self.links.confirming or self.nics.confirming or self.gpus.confirming
        return out
