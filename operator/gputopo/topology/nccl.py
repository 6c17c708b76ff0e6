"""How NCCL reaches a NIC from a GPU, per NCCL version: the path type and whether GPUDirect RDMA is used.

What NCCL's ``src/graph/paths.cc`` does (read at v2.19 to v2.30):

* Path types, nearest first: PIX, PXB, P2C, PXN, PHB, SYS (NVLink kinds and NET aside). ``nvidia-smi``'s NODE
  is NCCL's PHB (both cross a host bridge inside one NUMA node).
* GPUDirect RDMA is used when the path is no farther than ``NCCL_NET_GDR_LEVEL``: PXB by default, P2C from
  2.29 when ``NCCL_NET_GDR_C2C`` is on (``ncclTopoCheckGdr``). On a GPU reached over PCIe no path is P2C, so
  both defaults admit the same NICs.
* A GPU attached to its Grace CPU by NVLink-C2C (GH200, GB200, GB300) reaches the NICs on that Grace's PCIe
  by C2C then PHB. Before 2.26 that path counted as PHB: no GDR. 2.26 added ``NCCL_NET_GDR_C2C`` (default 0);
  2.27.3 turned it on by default and named the path P2C (``mergePathType``: C2C then PHB), given only to the
  NICs nearest the GPU. A NIC on the other Grace stays SYS: no GDR unless ``NCCL_NET_GDR_LEVEL=SYS``.
* PXN (a GPU sends through a peer GPU's NIC over NVLink) needs the peer's path to be PXB or better, or P2C
  too when ``NCCL_PXN_C2C`` is on: 0 in 2.27, 1 from 2.28.

Which NICs sit on a GPU's own Grace: the NIC's NUMA node against the GPU's where both are known, else the
NIC's distance (PIX to NODE share the GPU's NUMA node, SYS does not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Gpu, Nic, TopologyError

__all__ = [
    "DEFAULT_NCCL",
    "DEFAULT_NCCL_VERSION",
    "NcclPath",
    "NcclSettings",
    "NcclVersion",
    "NicPath",
    "nic_path",
    "on_own_grace",
]


@dataclass(frozen=True, slots=True, order=True)
class NcclVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> NcclVersion:
        """``2.27.3``, ``2.27``, ``v2.27.3-1`` or NCCL's integer code ``22703``."""
        value = text.strip().removeprefix("v")
        if value.isdigit() and len(value) >= 5:
            code = int(value)
            return cls(code // 10000, code // 100 % 100, code % 100)
        match = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?", value)
        if match is None:
            raise TopologyError(f"not an NCCL version: {text!r} (expected e.g. 2.27.3)")
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


# The newest NCCL release read for these rules (v2.30.7); 2.29 and 2.30 behave alike here.
DEFAULT_NCCL_VERSION = NcclVersion(2, 30, 7)

_C2C_SWITCH = NcclVersion(2, 26, 0)  # NCCL_NET_GDR_C2C exists, default 0
_C2C_ON = NcclVersion(2, 27, 3)  # NCCL_NET_GDR_C2C=1 by default, path type P2C
_PXN_C2C_ON = NcclVersion(2, 28, 0)  # NCCL_PXN_C2C=1 by default
_GDR_LEVEL_P2C = NcclVersion(2, 29, 0)  # default NCCL_NET_GDR_LEVEL is P2C when NET_GDR_C2C is on


class NcclPath(StrEnum):
    """NCCL's GPU-to-NIC path types that a NIC can be at, nearest first."""

    PIX = "PIX"
    PXB = "PXB"
    P2C = "P2C"
    PXN = "PXN"
    PHB = "PHB"
    SYS = "SYS"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)


_ORDER = tuple(NcclPath)
_FROM_DISTANCE = {
    LinkKind.PIX: NcclPath.PIX,
    LinkKind.PXB: NcclPath.PXB,
    LinkKind.PHB: NcclPath.PHB,
    LinkKind.NODE: NcclPath.PHB,
    LinkKind.SYS: NcclPath.SYS,
}


@dataclass(frozen=True, slots=True)
class NcclSettings:
    """The NCCL a job runs with: its version, and the environment variables that change GDR (None: default)."""

    version: NcclVersion = DEFAULT_NCCL_VERSION
    net_gdr_c2c: bool | None = None  # NCCL_NET_GDR_C2C
    net_gdr_level: NcclPath | None = None  # NCCL_NET_GDR_LEVEL
    pxn_c2c: bool | None = None  # NCCL_PXN_C2C

    @property
    def gdr_c2c(self) -> bool:
        """GDR to the NICs of the GPU's own Grace (P2C) is on."""
        if self.version < _C2C_SWITCH:
            return False
        if self.net_gdr_c2c is not None:
            return self.net_gdr_c2c
        return self.version >= _C2C_ON

    @property
    def pxn_level(self) -> NcclPath:
        """How far a peer GPU's NIC may be for PXN through that peer."""
        on = self.pxn_c2c if self.pxn_c2c is not None else self.version >= _PXN_C2C_ON
        return NcclPath.P2C if on and self.version >= _C2C_ON else NcclPath.PXB

    @property
    def gdr_level(self) -> NcclPath:
        if self.net_gdr_level is not None:
            return self.net_gdr_level
        return NcclPath.P2C if self.gdr_c2c and self.version >= _GDR_LEVEL_P2C else NcclPath.PXB

    def describe(self) -> str:
        parts = [f"NCCL {self.version}", f"GDR over C2C {'on' if self.gdr_c2c else 'off'}"]
        if self.net_gdr_level is not None:
            parts.append(f"NCCL_NET_GDR_LEVEL={self.net_gdr_level}")
        return ", ".join(parts)


DEFAULT_NCCL = NcclSettings()


@dataclass(frozen=True, slots=True)
class NicPath:
    """How one GPU reaches one NIC: NCCL's path type, whether GPUDirect RDMA is used, the matrix's distance."""

    path: NcclPath
    gdr: bool
    distance: LinkKind


def on_own_grace(gpu: Gpu, nic: Nic) -> bool:
    """The NIC hangs off the PCIe of the CPU that this GPU reaches over NVLink-C2C."""
    if gpu.numa_node is not None and nic.numa_node is not None:
        return gpu.numa_node == nic.numa_node
    return nic.distance(gpu.index) is not LinkKind.SYS


def nic_path(gpu: Gpu, nic: Nic, settings: NcclSettings = DEFAULT_NCCL) -> NicPath:
    """NCCL's path from a GPU to a NIC and whether GDR is used on it (``ncclTopoCheckGdr``)."""
    distance = nic.distance(gpu.index)
    path = _FROM_DISTANCE[distance]
    c2c_path = False
    if gpu.c2c and path not in (NcclPath.PIX, NcclPath.PXB):
        if on_own_grace(gpu, nic):
            # C2C then PHB: P2C once NCCL names it (2.27.3); before, a PHB path (2.26 lets NET_GDR_C2C admit it).
            c2c_path = settings.version >= _C2C_SWITCH
            path = NcclPath.P2C if settings.version >= _C2C_ON else NcclPath.PHB
        else:
            path = NcclPath.SYS
    if c2c_path and settings.gdr_c2c:
        # Up to 2.28 NCCL checks such a path as C2C, nearer than any level; from 2.29 as P2C against the level.
        gdr = settings.version < _GDR_LEVEL_P2C or NcclPath.P2C.rank <= settings.gdr_level.rank
    else:
        gdr = path.rank <= settings.gdr_level.rank
    return NicPath(path, gdr, distance)
