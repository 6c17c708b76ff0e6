"""The pure topology model of one GPU node: GPUs, the link between every GPU pair, NICs, system facts.

Immutable: a change (a link going down, say) returns a new ``Topology``. Conversion to and from the
NodeTopology status of the API lives in ``gputopo.topology.convert``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from gputopo.api.nodetopology import FabricState, GpuHealthState, LinkKind, LinkState, NicRole, NicState
from gputopo.errors import GputopoError
from gputopo.topology.memo import Memo

__all__ = [
    "PCIE_LEVELS",
    "ZERO_CLUSTER_UUID",
    "Fabric",
    "Gpu",
    "Link",
    "Nic",
    "SystemFacts",
    "Topology",
    "TopologyError",
    "pair",
]

# PCIe levels from nearest to farthest, as nvidia-smi names them.
PCIE_LEVELS: tuple[LinkKind, ...] = (LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE, LinkKind.SYS)


class TopologyError(GputopoError, ValueError):
    """A topology that cannot be right: a link to a missing GPU, a GPU linked to itself, …"""


def pair(a: int, b: int) -> tuple[int, int]:
    """The key of an unordered GPU pair."""
    return (a, b) if a < b else (b, a)


# NVML's cluster UUID of a GPU that has NVLink but no multi-node fabric (the NVIDIA DRA driver's reading).
ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class Fabric:
    """A GPU's multi-node NVLink fabric info (``nvmlGpuFabricInfo_v3_t``): which NVLink domain it is in.

    ``status`` is the registration's nvmlReturn_t (0 = success), read only when ``state`` is Completed;
    ``health_mask`` and ``health_summary`` are NVML's raw values (``gputopo.topology.fabric`` decodes them).
    """

    cluster_uuid: str = ""
    clique_id: int = 0
    state: FabricState = FabricState.NOT_SUPPORTED
    status: int = 0
    health_mask: int = 0
    health_summary: int = 0

    @property
    def attached(self) -> bool:
        """In a multi-node NVLink domain: registered (Completed, success) with a non-zero cluster UUID.

        The rule of go-nvlib's ``IsFabricAttached``, which GPU Feature Discovery and NCCL also apply.
        """
        return (
            self.state is FabricState.COMPLETED
            and self.status == 0
            and self.cluster_uuid not in ("", ZERO_CLUSTER_UUID)
        )

    @property
    def clique(self) -> str:
        """``<clusterUuid>.<cliqueId>`` (GPU Feature Discovery's ``nvidia.com/gpu.clique``), '' unattached."""
        return f"{self.cluster_uuid}.{self.clique_id}" if self.attached else ""


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str = ""
    model: str = ""
    architecture: str = ""
    memory_mib: int = 0
    pci_bus_id: str = ""
    # The NUMA node of the CPU the GPU hangs off (nvidia-smi's "NUMA Affinity"; on Grace, its Grace's node),
    # never a Grace GPU's own memory node ("GPU NUMA ID"): a NIC on the same node is on the GPU's own Grace.
    numa_node: int | None = None
    pcie_generation: int = 0
    pcie_width: int = 0
    nvlink_version: int = 0
    health: GpuHealthState = GpuHealthState.HEALTHY
    health_reason: str = ""
    fabric: Fabric | None = None
    # NVLink-C2C to the GPU's own Grace CPU (GH200, GB200, GB300): links up and their total bandwidth in GB/s,
    # as NVML reports them; 0 on a GPU that reaches its CPU over PCIe.
    c2c_links: int = 0
    c2c_gbps: float = 0.0

    @property
    def c2c(self) -> bool:
        """The GPU reaches its CPU, and the NICs on that CPU's PCIe, over NVLink-C2C."""
        return self.c2c_links > 0

    @property
    def healthy(self) -> bool:
        return self.health is not GpuHealthState.UNHEALTHY


@dataclass(frozen=True, slots=True)
class Link:
    """The connection between GPUs ``a`` < ``b``: NVLink (with its link count), NVSwitch, or a PCIe level."""

    a: int
    b: int
    kind: LinkKind
    nvlinks: int = 0
    state: LinkState = LinkState.UP

    @property
    def is_nvlink(self) -> bool:
        return self.kind in (LinkKind.NVLINK, LinkKind.NVSWITCH)

    @property
    def usable_nvlink(self) -> bool:
        """NVLink that carries traffic now (a Down NVLink falls back to PCIe)."""
        return self.is_nvlink and self.state is not LinkState.DOWN


@dataclass(frozen=True, slots=True)
class Nic:
    """An RDMA NIC; ``affinity[i]`` is its PCIe distance to GPU i (PIX nearest … SYS farthest).

    ``role`` is None where nothing said what the NIC carries (an imported matrix): it counts as a compute rail.
    ``default_route`` is whether the node's default route leaves through it (a front-end port's mark).
    """

    name: str
    link_layer: str = "InfiniBand"
    state: NicState = NicState.UP
    rate_gbps: float = 0.0
    numa_node: int | None = None
    pci_bus_id: str = ""
    affinity: tuple[LinkKind, ...] = ()
    role: NicRole | None = None
    default_route: bool = False

    @property
    def up(self) -> bool:
        return self.state is NicState.UP

    @property
    def compute(self) -> bool:
        """A rail NCCL may use for collectives: a compute NIC, or one whose role nobody stated."""
        return self.role is None or self.role is NicRole.COMPUTE

    def distance(self, gpu: int) -> LinkKind:
        return self.affinity[gpu] if gpu < len(self.affinity) else LinkKind.SYS


@dataclass(frozen=True, slots=True)
class SystemFacts:
    """Node-wide facts; ``assumptions`` says what a reading had to assume where its source is silent (a Grace
    matrix says neither which NICs are compute rails nor, when every cell is SYS, which Grace a NIC is on)."""

    driver_version: str = ""
    cuda_driver_version: str = ""
    nvswitch: bool = False
    gpudirect_rdma: bool = False
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """One node's GPUs and the link between every pair of them."""

    gpus: tuple[Gpu, ...]
    links: Mapping[tuple[int, int], Link]
    nics: tuple[Nic, ...] = ()
    system: SystemFacts = field(default_factory=SystemFacts)

    def __post_init__(self) -> None:
        indices = [g.index for g in self.gpus]
        if indices != list(range(len(indices))):
            raise TopologyError(f"GPU indices must be 0..{len(indices) - 1} in order, got {indices}")
        n = len(self.gpus)
        for key, link in self.links.items():
            if key != (link.a, link.b) or not 0 <= link.a < link.b < n:
                raise TopologyError(f"link {key} does not join two distinct GPUs of 0..{n - 1}")
        for a in range(n):
            for b in range(a + 1, n):
                if (a, b) not in self.links:
                    raise TopologyError(f"no link between GPU{a} and GPU{b}")
        for nic in self.nics:
            if nic.affinity and len(nic.affinity) != n:
                raise TopologyError(f"NIC {nic.name} has affinity to {len(nic.affinity)} GPUs, not {n}")

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        gpus: Iterable[Gpu],
        links: Iterable[Link],
        nics: Iterable[Nic] = (),
        system: SystemFacts | None = None,
    ) -> Topology:
        by_pair: dict[tuple[int, int], Link] = {}
        for link in links:
            a, b = pair(link.a, link.b)
            if a == b:
                raise TopologyError(f"GPU{a} cannot be linked to itself")
            by_pair[(a, b)] = replace(link, a=a, b=b)
        return cls(tuple(gpus), by_pair, tuple(nics), system or SystemFacts())

    # -- queries --------------------------------------------------------------------------------------------

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model if self.gpus else ""

    def link(self, a: int, b: int) -> Link:
        return self.links[pair(a, b)]

    def nvlinks(self, a: int, b: int) -> int:
        """NVLinks between a and b that carry traffic now (0 when none, or when the link is Down)."""
        if a == b:
            return 0
        link = self.link(a, b)
        return link.nvlinks if link.usable_nvlink else 0

    @cached_property
    def memo(self) -> Memo:
        """Views derived from this immutable topology (the estimator's tables, NVLink domains).

        It lives and dies with the object, so a cache keyed on it never outlives or confuses a topology.
        """
        return Memo()

    @cached_property
    def nvlink_matrix(self) -> tuple[tuple[int, ...], ...]:
        n = self.gpu_count
        return tuple(tuple(self.nvlinks(a, b) for b in range(n)) for a in range(n))

    # -- changes (each returns a new Topology) ------------------------------------------------------------

    def with_link_state(self, a: int, b: int, state: LinkState, nvlinks: int | None = None) -> Topology:
        key = pair(a, b)
        old = self.links[key]
        links = dict(self.links)
        links[key] = replace(old, state=state, nvlinks=old.nvlinks if nvlinks is None else nvlinks)
        return Topology(self.gpus, links, self.nics, self.system)

    def with_nic_state(self, name: str, state: NicState) -> Topology:
        nics = tuple(replace(n, state=state) if n.name == name else n for n in self.nics)
        return Topology(self.gpus, self.links, nics, self.system)

    def with_gpu_health(self, index: int, health: GpuHealthState, reason: str = "") -> Topology:
        gpus = tuple(replace(g, health=health, health_reason=reason) if g.index == index else g for g in self.gpus)
        return Topology(gpus, self.links, self.nics, self.system)

    def with_gpu_model(self, model: str, nvlink_version: int | None = None) -> Topology:
        gpus = tuple(
            replace(g, model=model, nvlink_version=g.nvlink_version if nvlink_version is None else nvlink_version)
            for g in self.gpus
        )
        return Topology(gpus, self.links, self.nics, self.system)
