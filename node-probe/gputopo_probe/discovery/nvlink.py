"""NVLink discovery, following NCCL's recipe: per link, P2P capability, state, version, the far end.

Links are counted per remote GPU. A link whose far end is an NVSwitch (remote device type SWITCH, PCI class
0x068000, or a far end the host cannot see, as in VMs) makes the GPU part of an NVSwitch domain.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import pynvml

from gputopo_probe.discovery.sysfs import NVSWITCH_PCI_CLASS, Sysfs
from gputopo_probe.errors import NvmlNotSupportedError
from gputopo_probe.nvml import ARCH_HOPPER, NVLINK_GENERATION, Nvml, normalise_bus_id

__all__ = ["MAX_LINKS", "NvlinkPort", "field_value", "link_active", "links_to", "read_ports", "switch_links"]

MAX_LINKS: Final = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
FI_NVLINK_GET_STATE: Final = 165
_TYPE_GPU: Final = 0x00
_TYPE_SWITCH: Final = 0x02


@dataclass(frozen=True, slots=True)
class NvlinkPort:
    """One NVLink of a GPU; ``peer`` is the remote GPU's index, None for an NVSwitch (``switch`` True)."""

    gpu: int
    link: int
    peer: int | None
    switch: bool
    version: int
    active: bool


def field_value(nvml: Nvml, handle: Any, field: int, scope: int) -> int | None:
    """One NVML field value (``nvmlDeviceGetFieldValues``), None when NVML has no value for it."""
    values = nvml.optional("nvmlDeviceGetFieldValues", handle, [(field, scope)], default=None)
    if not values:
        return None
    value = values[0]
    if getattr(value, "nvmlReturn", 0) != 0:
        return None
    return int(value.value.ullVal)


def link_active(nvml: Nvml, handle: Any, link: int, hopper_or_newer: bool) -> bool:
    if hopper_or_newer:
        state = field_value(nvml, handle, FI_NVLINK_GET_STATE, link)
        if state is not None:
            return state == 1
    return int(nvml.call("nvmlDeviceGetNvLinkState", handle, link)) == 1


def _remote_is_switch(nvml: Nvml, sysfs: Sysfs, handle: Any, link: int, bus_id: str) -> bool | None:
    """True for an NVSwitch, False for a GPU, None for something else (an IBM NPU)."""
    kind = nvml.optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link, default=None)
    if kind == _TYPE_SWITCH:
        return True
    if kind == _TYPE_GPU:
        return False
    if not bus_id:
        return True  # invisible far end: NCCL assumes an NVSwitch (VMs hide them)
    pci_class = sysfs.pci_class(bus_id)
    if pci_class is None:
        return True if kind is None else None
    if pci_class == NVSWITCH_PCI_CLASS:
        return True
    return False if (pci_class >> 16) == 0x03 else None


def read_ports(
    nvml: Nvml, sysfs: Sysfs, index: int, handle: Any, arch: int | None, gpu_by_bus: dict[str, int]
) -> list[NvlinkPort]:
    hopper = arch is not None and arch >= ARCH_HOPPER
    ports: list[NvlinkPort] = []
    for link in range(MAX_LINKS):
        try:
            capable = nvml.call("nvmlDeviceGetNvLinkCapability", handle, link, 0)  # P2P_SUPPORTED
        except NvmlNotSupportedError:
            continue
        if not capable:
            continue
        try:
            active = link_active(nvml, handle, link, hopper)
            remote = nvml.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        except NvmlNotSupportedError:
            continue
        bus_id = normalise_bus_id(remote.busId)
        switch = _remote_is_switch(nvml, sysfs, handle, link, bus_id)
        if switch is None:
            continue
        peer = None if switch else gpu_by_bus.get(bus_id)
        if not switch and peer is None:
            continue  # a GPU this probe cannot see (another container's, say)
        version = NVLINK_GENERATION.get(int(nvml.optional("nvmlDeviceGetNvLinkVersion", handle, link, default=0)), 0)
        ports.append(NvlinkPort(index, link, peer, switch, version, active))
    return ports


def links_to(ports: list[NvlinkPort]) -> Counter[int]:
    """Links per remote GPU."""
    return Counter(p.peer for p in ports if p.peer is not None)


def switch_links(ports: list[NvlinkPort]) -> int:
    return sum(1 for p in ports if p.switch)
