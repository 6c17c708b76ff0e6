"""The NodeTopology resource: one per GPU node, written by the node probe, read by the operator.

It says what the node's GPUs, links and NICs are and how healthy; it is written when that changes. Which pods
hold which GPUs changes far more often and is a small object of its own (``NodePodGpus``)."""

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from gputopo.api.base import NodeObject, StatusModel
from gputopo.api.conditions import Condition

__all__ = [
    "FabricHealth",
    "FabricState",
    "GpuC2c",
    "GpuFabric",
    "GpuHealth",
    "GpuHealthState",
    "GpuStatus",
    "LinkKind",
    "LinkState",
    "LinkStatus",
    "NicAffinity",
    "NicRole",
    "NicState",
    "NicStatus",
    "NodeTopology",
    "NodeTopologyStatus",
    "NvlinkDomain",
    "NvlinkInfo",
    "PcieInfo",
    "ProbeInfo",
    "SystemInfo",
]


class LinkKind(StrEnum):
    """How two GPUs (or a GPU and a NIC) reach each other, best first; the PCIe levels are nvidia-smi's."""

    NVSWITCH = "NVSwitch"
    NVLINK = "NVLink"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


class LinkState(StrEnum):
    UP = "Up"
    DEGRADED = "Degraded"
    DOWN = "Down"


class NicState(StrEnum):
    UP = "Up"
    DOWN = "Down"


class NicRole(StrEnum):
    """What a NIC carries: NCCL's compute rails, or storage and front-end ports that collectives must not use."""

    COMPUTE = "Compute"
    STORAGE = "Storage"
    FRONT_END = "FrontEnd"


class GpuHealthState(StrEnum):
    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    UNHEALTHY = "Unhealthy"


class FabricState(StrEnum):
    """NVML's ``nvmlGpuFabricState_t``: whether the GPU has registered with the NVLink fabric manager."""

    NOT_SUPPORTED = "NotSupported"
    NOT_STARTED = "NotStarted"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"


class FabricHealth(StrEnum):
    """A GPU's (or a node's) NVLink fabric as placement sees it."""

    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    DOWN = "Down"


class GpuFabric(StatusModel):
    """A GPU's multi-node NVLink fabric info, as ``nvmlDeviceGetGpuFabricInfoV`` reports it.

    ``clique`` is ``<clusterUuid>.<cliqueId>`` (GPU Feature Discovery's ``nvidia.com/gpu.clique`` value),
    empty when the GPU is not attached to a multi-node fabric (state not Completed, a zero cluster UUID or
    a failed registration).
    """

    cluster_uuid: str = ""
    clique_id: int = Field(default=0, ge=0)
    state: FabricState = FabricState.NOT_SUPPORTED
    status: int = Field(default=0, description="nvmlReturn_t of the registration (0 = success)")
    health_mask: int = Field(default=0, ge=0)
    health_summary: str = Field(default="", description="Healthy, Unhealthy, LimitedCapacity or empty")
    clique: str = ""
    health: FabricHealth = FabricHealth.HEALTHY
    reason: str = ""


class NvlinkDomain(StatusModel):
    """The node's multi-node NVLink domain (an NVL72 rack's NVSwitch fabric), from its GPUs' fabric info."""

    clique: str = Field(default="", description="<clusterUuid>.<cliqueId>; empty when the node is in none")
    health: FabricHealth = FabricHealth.HEALTHY
    reason: str = ""


class ProbeInfo(StatusModel):
    version: str = ""
    backend: str = Field(default="", description="nvml, fake or nvidia-smi")


class SystemInfo(StatusModel):
    driver_version: str = ""
    cuda_driver_version: str = ""
    gpu_direct_rdma: bool = Field(default=False, alias="gpuDirectRDMA")
    nvswitch: bool = False
    nvlink_domain: NvlinkDomain | None = None


class PcieInfo(StatusModel):
    generation: int = Field(default=0, ge=0)
    width: int = Field(default=0, ge=0)


class NvlinkInfo(StatusModel):
    version: int = Field(default=0, ge=0, description="NVLink generation (1-5), 0 without NVLink")
    active_links: int = Field(default=0, ge=0)


class GpuHealth(StatusModel):
    state: GpuHealthState = GpuHealthState.HEALTHY
    temperature_c: float | None = Field(default=None, alias="temperatureC")
    throttle_reasons: list[str] = Field(default_factory=list)
    xid: int | None = None
    reason: str = ""


class GpuC2c(StatusModel):
    """A Grace GPU's NVLink-C2C to its own Grace CPU (GH200, GB200, GB300), as NVML's C2C field values report it.

    ``nics`` are the NICs on that CPU's PCIe, which the GPU reaches over C2C and then the CPU's root port: the
    path NCCL calls P2C, where it uses GPUDirect RDMA (``NCCL_NET_GDR_C2C``). A NIC on the other Grace of a
    tray is not listed: NCCL sees it at SYS.
    """

    links: int = Field(default=0, ge=0, description="C2C links up")
    bandwidth_g_bps: float = Field(
        default=0.0, ge=0, alias="bandwidthGBps", description="total C2C bandwidth of the links up, GB/s"
    )
    nics: list[str] = Field(
        default_factory=list, description="names of the NICs on the GPU's own Grace CPU (NCCL path type P2C)"
    )


class GpuStatus(StatusModel):
    index: int = Field(ge=0)
    uuid: str = ""
    model: str = ""
    architecture: str = ""
    memory_mi_b: int = Field(default=0, ge=0, alias="memoryMiB")
    pci_bus_id: str = ""
    numa_node: int | None = None
    pcie: PcieInfo = Field(default_factory=PcieInfo)
    nvlink: NvlinkInfo = Field(default_factory=NvlinkInfo)
    health: GpuHealth = Field(default_factory=GpuHealth)
    fabric: GpuFabric | None = None
    c2c: GpuC2c | None = Field(
        default=None, alias="c2c", description="NVLink-C2C to the GPU's own CPU; absent without C2C"
    )


class LinkStatus(StatusModel):
    a: int = Field(ge=0)
    b: int = Field(ge=0)
    kind: LinkKind
    nvlinks: int = Field(default=0, ge=0)
    bandwidth_g_bps: float = Field(default=0.0, ge=0, alias="bandwidthGBps")
    state: LinkState = LinkState.UP


class NicAffinity(StatusModel):
    gpu: int = Field(ge=0)
    kind: LinkKind


class NicStatus(StatusModel):
    name: str
    link_layer: str = Field(default="InfiniBand", description="InfiniBand or Ethernet (RoCE)")
    state: NicState = NicState.UP
    rate_gbps: float = Field(default=0.0, ge=0)
    numa_node: int | None = None
    pci_bus_id: str = ""
    gpu_affinity: list[NicAffinity] = Field(default_factory=list)
    role: NicRole | None = Field(
        default=None,
        description="Compute (a rail NCCL uses), Storage or FrontEnd; absent where nothing said (counts as Compute)",
    )
    default_route: bool = Field(default=False, description="the node's default route leaves through this NIC")


class NodeTopologyStatus(StatusModel):
    observed_at: datetime | None = None
    probe: ProbeInfo = Field(default_factory=ProbeInfo)
    system: SystemInfo = Field(default_factory=SystemInfo)
    gpus: list[GpuStatus] = Field(default_factory=list)
    links: list[LinkStatus] = Field(default_factory=list)
    nics: list[NicStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)


class NodeTopology(NodeObject):
    kind: ClassVar[str] = "NodeTopology"
    plural: ClassVar[str] = "nodetopologies"
    status: NodeTopologyStatus = Field(default_factory=NodeTopologyStatus)
