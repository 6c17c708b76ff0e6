"""A Grace GPU's NVLink-C2C to its CPU from NVML (GH200, GB200, GB300), read as NCCL reads it.

``nvmlDeviceGetC2cModeInfoV`` says whether C2C is enabled; the field values give the link count
(``NVML_FI_DEV_C2C_LINK_COUNT``, scope 0), and per link its status (``..._GET_STATUS``, 1 = active) and
bandwidth in MB/s (``..._GET_MAX_BW``). Like NCCL's ``xml.cc``, only active links count and the bandwidth is
their sum. A GPU without C2C (every PCIe GPU, an H200 on an x86 board) answers NOT_SUPPORTED: no C2C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from gputopo_probe.discovery.nvlink import field_value
from gputopo_probe.errors import GpuLostError, NvmlError
from gputopo_probe.nvml import Nvml

__all__ = ["FI_C2C_LINK_COUNT", "FI_C2C_LINK_GET_MAX_BW", "FI_C2C_LINK_GET_STATUS", "C2c", "read_c2c"]

FI_C2C_LINK_COUNT: Final = 170
FI_C2C_LINK_GET_STATUS: Final = 171
FI_C2C_LINK_GET_MAX_BW: Final = 172
_ACTIVE: Final = 1


@dataclass(frozen=True, slots=True)
class C2c:
    """Links up and their total bandwidth (GB/s); ``links == 0``: no C2C (or none up)."""

    links: int = 0
    gbps: float = 0.0


def _enabled(nvml: Nvml, handle: Any) -> bool | None:
    """C2C mode as NVML states it; None when this driver or binding cannot say (older than the V call)."""
    try:
        info = nvml.call("nvmlDeviceGetC2cModeInfoV", handle)
    except GpuLostError:
        raise
    except NvmlError:
        return None
    return bool(getattr(info, "isC2cEnabled", 0))


def read_c2c(nvml: Nvml, handle: Any) -> C2c:
    """The GPU's C2C; any NVML error but a lost GPU reads as no C2C (one field lost, never the probe)."""
    if _enabled(nvml, handle) is False:
        return C2c()
    try:
        count = field_value(nvml, handle, FI_C2C_LINK_COUNT, 0)
        if not count:
            return C2c()
        fields = [(f, link) for link in range(count) for f in (FI_C2C_LINK_GET_STATUS, FI_C2C_LINK_GET_MAX_BW)]
        values = nvml.optional("nvmlDeviceGetFieldValues", handle, fields, default=None)
    except GpuLostError:
        raise
    except NvmlError:
        return C2c()
    if not values or len(values) != len(fields):
        return C2c()
    links, mbps = 0, 0
    for status, bandwidth in zip(values[0::2], values[1::2], strict=True):
        if getattr(status, "nvmlReturn", 0) != 0 or getattr(bandwidth, "nvmlReturn", 0) != 0:
            continue
        if int(status.value.ullVal) == _ACTIVE:
            links += 1
            mbps += int(bandwidth.value.ullVal)
    return C2c(links, mbps / 1000) if links else C2c()
