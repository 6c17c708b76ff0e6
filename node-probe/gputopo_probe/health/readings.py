"""One health poll: what NVML and sysfs say right now, before hysteresis.

Per GPU one ``nvmlDeviceGetFieldValues`` call reads the NVLink states (Hopper and newer) and error totals,
so a poll of an 8-GPU node is a few dozen NVML calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from gputopo.api.nodetopology import LinkKind, LinkState, NicState
from gputopo.topology.model import Fabric
from gputopo_probe.discovery.fabric import read_fabric
from gputopo_probe.discovery.inventory import Inventory
from gputopo_probe.discovery.nvlink import FI_NVLINK_GET_STATE
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.errors import GpuLostError, NvmlError
from gputopo_probe.nvml import ARCH_HOPPER, Nvml

__all__ = ["THROTTLE_REASONS", "GpuReading", "Readings", "read_health"]

_FI_ERROR_TOTALS: Final = (38, 45, 52, 59)  # CRC flit, CRC data, replay, recovery
_FI_RECOVERY_ACTION: Final = 230
THROTTLE_REASONS: Final = {
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
}
_SLOWDOWN: Final = 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True, slots=True)
class GpuReading:
    lost: bool = False
    active_links: int = 0
    link_errors: int = 0
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    slowdown: bool = False
    uncorrected_ecc: int = 0
    recovery_action: int | None = None
    fabric: Fabric | None = None


@dataclass
class Readings:
    gpus: list[GpuReading] = field(default_factory=list)
    active: dict[tuple[int, int], bool] = field(default_factory=dict)
    """(gpu, link) -> the link reads active."""
    p2p_ok: dict[tuple[int, int], bool] = field(default_factory=dict)
    nics: dict[str, NicState] = field(default_factory=dict)
    switch_up: list[int] = field(default_factory=list)
    """Per GPU, how many of its NVSwitch links read active."""


def _fields(nvml: Nvml, handle: Any, links: list[int], hopper: bool) -> dict[tuple[int, int], int]:
    ids = [(FI_NVLINK_GET_STATE, n) for n in links] if hopper else []
    ids += [(f, 0) for f in _FI_ERROR_TOTALS] + [(_FI_RECOVERY_ACTION, 0)]
    values = nvml.optional("nvmlDeviceGetFieldValues", handle, ids, default=None) or []
    return {(int(v.fieldId), int(v.scopeId)): int(v.value.ullVal) for v in values if getattr(v, "nvmlReturn", 0) == 0}


def _read_gpu(nvml: Nvml, inventory: Inventory, gpu: int, out: Readings) -> GpuReading:
    handle = inventory.handles[gpu]
    arch = inventory.architectures[gpu]
    links = [p.link for p in inventory.ports[gpu]]
    values = _fields(nvml, handle, links, arch is not None and arch >= ARCH_HOPPER)
    active = 0
    for n in links:
        state = values.get((FI_NVLINK_GET_STATE, n))
        if state is None:
            state = int(nvml.read("nvmlDeviceGetNvLinkState", handle, n, default=0))
        out.active[(gpu, n)] = state == 1
        active += state == 1
    temperature = nvml.read("nvmlDeviceGetTemperature", handle, 0, default=None)
    reasons = int(nvml.read("nvmlDeviceGetCurrentClocksEventReasons", handle, default=0))
    ecc = int(nvml.read("nvmlDeviceGetTotalEccErrors", handle, 1, 0, default=0))  # uncorrected, volatile
    fabric = inventory.topology.gpus[gpu].fabric
    if fabric is not None:  # only GPUs that had a fabric at discovery: one more NVML call each
        try:
            fabric = read_fabric(nvml, handle)
        except GpuLostError:
            raise
        except NvmlError:
            pass  # a failed read is no evidence against the fabric: keep what discovery saw
    return GpuReading(
        active_links=active,
        link_errors=sum(values.get((f, 0), 0) for f in _FI_ERROR_TOTALS),
        temperature_c=float(temperature) if temperature is not None else None,
        throttle_reasons=tuple(name for bit, name in THROTTLE_REASONS.items() if reasons & bit),
        slowdown=bool(reasons & _SLOWDOWN),
        uncorrected_ecc=ecc,
        recovery_action=values.get((_FI_RECOVERY_ACTION, 0)),
        fabric=fabric,
    )


def read_health(nvml: Nvml, sysfs: Sysfs, inventory: Inventory) -> Readings:
    out = Readings()
    lost: set[int] = set()
    for gpu in range(inventory.topology.gpu_count):
        try:
            out.gpus.append(_read_gpu(nvml, inventory, gpu, out))
        except GpuLostError:
            lost.add(gpu)
            out.gpus.append(GpuReading(lost=True))
    for (a, b), index in inventory.p2p_checked.items():
        if a in lost or b in lost:
            out.p2p_ok[(a, b)] = False
            continue
        try:
            status = nvml.call("nvmlDeviceGetP2PStatus", inventory.handles[a], inventory.handles[b], index)
            out.p2p_ok[(a, b)] = status == 0
        except GpuLostError:
            out.p2p_ok[(a, b)] = False
        except NvmlError:
            out.p2p_ok[(a, b)] = True  # a failed read is no evidence against the pair
    out.switch_up = [
        sum(1 for n in links if out.active.get((gpu, n), False)) for gpu, links in enumerate(inventory.switch_ports)
    ]
    for port in inventory.nic_ports:
        state = sysfs.nic_state(port.name, port.port)
        up = state is not None and state[0] == "ACTIVE" and state[1] == "LinkUp"
        out.nics[port.name] = NicState.UP if up else NicState.DOWN
    return out


def link_reading(inventory: Inventory, readings: Readings, a: int, b: int) -> LinkState:
    """The pair's state this poll: Down without a route, Degraded with fewer links or rising errors."""
    link = inventory.topology.link(a, b)
    if readings.p2p_ok.get((a, b)) is False:
        return LinkState.DOWN
    ga, gb = readings.gpus[a], readings.gpus[b]
    if ga.lost or gb.lost:
        return LinkState.DOWN
    if link.kind is LinkKind.NVLINK:
        active = sum(1 for n in inventory.peer_ports.get((a, b), ()) if readings.active.get((a, n), False))
        if active == 0:
            return LinkState.DOWN
        return LinkState.DEGRADED if active < link.nvlinks else LinkState.UP
    if link.kind is LinkKind.NVSWITCH:
        up_a, up_b = readings.switch_up[a], readings.switch_up[b]
        if up_a == 0 or up_b == 0:
            return LinkState.DOWN
        expected = inventory.switch_ports
        return LinkState.DEGRADED if up_a < len(expected[a]) or up_b < len(expected[b]) else LinkState.UP
    return LinkState.UP
