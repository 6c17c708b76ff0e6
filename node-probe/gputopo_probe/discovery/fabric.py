"""A GPU's multi-node NVLink fabric info from NVML (GB200/GB300 NVL72 racks, Hopper NVSwitch systems).

``nvmlDeviceGetGpuFabricInfoV`` with a ``c_nvmlGpuFabricInfo_v3_t`` (it has ``healthSummary``; pynvml's
``c_nvmlGpuFabricInfoV_t`` is the v2 struct), passed by reference as the C function expects; a driver without
the V call falls back to the deprecated ``nvmlDeviceGetGpuFabricInfo`` (v1: no health). The cluster UUID is
formatted as GPU Feature Discovery and the NVIDIA DRA driver do (``uuid.FromBytes(...).String()``).
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any, Final

import pynvml

from gputopo.api.nodetopology import FabricState
from gputopo.topology.model import Fabric
from gputopo_probe.errors import NvmlNotSupportedError
from gputopo_probe.nvml import Nvml

__all__ = ["FABRIC_STATES", "read_fabric"]

FABRIC_STATES: Final[dict[int, FabricState]] = {
    0: FabricState.NOT_SUPPORTED,
    1: FabricState.NOT_STARTED,
    2: FabricState.IN_PROGRESS,
    3: FabricState.COMPLETED,
}


def _cluster_uuid(raw: Any) -> str:
    data = bytes(raw)
    return str(uuid.UUID(bytes=data)) if len(data) == 16 else ""


def read_fabric(nvml: Nvml, handle: Any) -> Fabric | None:
    """The GPU's fabric info; None when NVML does not support it (no NVSwitch fabric, pre-Hopper, old driver).

    A lost GPU raises ``GpuLostError`` like any other read.
    """
    info: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
    try:
        nvml.call("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info))
        mask, summary = int(info.healthMask), int(info.healthSummary)
    except NvmlNotSupportedError:
        info = pynvml.c_nvmlGpuFabricInfo_t()
        try:
            nvml.call("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info))
        except NvmlNotSupportedError:
            return None
        mask, summary = 0, 0
    state = FABRIC_STATES.get(int(info.state), FabricState.NOT_SUPPORTED)
    if state is FabricState.NOT_SUPPORTED:
        return None
    return Fabric(
        cluster_uuid=_cluster_uuid(info.clusterUuid),
        clique_id=int(info.cliqueId),
        state=state,
        status=int(info.status) if state is FabricState.COMPLETED else 0,
        health_mask=mask,
        health_summary=summary,
    )
