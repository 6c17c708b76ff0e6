"""Which NICs are compute rails, and which are storage or front-end ports: a pure decision over sysfs facts.

On a Grace node (GH200, GB200, GB300) every NIC is NODE or SYS to every GPU, so PCIe distance cannot tell the
InfiniBand rails NCCL should use from storage and front-end ports. NVIDIA's NVSentinel NIC monitor tells them
apart by link layer, the default route and NUMA locality (NVIDIA/NVSentinel PR #1221); the rules here, in order:

1. a name matched by a setting (``computeNics``, ``storageNics``, ``frontEndNics``; the first that matches);
2. the node's default route leaves through it (or through a bond or bridge above it): FrontEnd;
3. it shares a PCIe switch with a GPU (PIX or PXB): Compute, the rail beside that GPU;
4. its NUMA node has no GPU: Storage;
5. InfiniBand: Compute;
6. Ethernet on a node with InfiniBand NICs: FrontEnd for a BlueField DPU's port, else Storage; Ethernet on a
   node without (a RoCE fabric): Compute;
7. link layer unknown: no role (counts as Compute).

Step 4 needs NUMA numbers to mean CPU sockets. Where no NIC at all shares a NUMA node with a GPU, they do not
(a Grace GPU's memory is its own NUMA node, and a driver may report that one): the step is skipped then.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from gputopo.api.nodetopology import LinkKind, NicRole
from gputopo_probe.errors import ProbeError

__all__ = ["BLUEFIELD_PCI_IDS", "NicFacts", "NicRoleRules", "nic_roles"]

# PCI ids of BlueField DPUs' network functions (vendor Mellanox/NVIDIA 0x15b3): BlueField-2 integrated
# ConnectX-6 Dx, BlueField-3 integrated ConnectX-7, BlueField-3 Lx.
BLUEFIELD_PCI_IDS: Final = frozenset({(0x15B3, 0xA2D6), (0x15B3, 0xA2DC), (0x15B3, 0xA2D9)})
_BESIDE_A_GPU: Final = frozenset({LinkKind.PIX, LinkKind.PXB})
_INFINIBAND, _ETHERNET = "InfiniBand", "Ethernet"


@dataclass(frozen=True, slots=True)
class NicFacts:
    """What sysfs and procfs said of one RDMA NIC; None (or '') where they could not say."""

    name: str
    link_layer: str = ""
    numa_node: int | None = None
    default_route: bool | None = None
    nearest_gpu: LinkKind | None = None
    """Its nearest PCIe distance to any GPU; None on a node without GPUs or without PCI paths."""
    bluefield: bool = False


def _compile(setting: str, pattern: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ProbeError(f"{setting}: not a regular expression ({error}): {pattern!r}") from error


@dataclass(frozen=True, slots=True)
class NicRoleRules:
    """Roles named by the operator of the cluster: regular expressions matched against a NIC's whole name."""

    compute: re.Pattern[str] | None = None
    storage: re.Pattern[str] | None = None
    front_end: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, compute: str = "", storage: str = "", front_end: str = "") -> NicRoleRules:
        """Raises ``ProbeError`` naming the setting when a pattern does not compile."""
        return cls(
            _compile("computeNics", compute), _compile("storageNics", storage), _compile("frontEndNics", front_end)
        )

    def named(self, name: str) -> NicRole | None:
        rules = ((self.compute, NicRole.COMPUTE), (self.storage, NicRole.STORAGE), (self.front_end, NicRole.FRONT_END))
        for pattern, role in rules:
            if pattern is not None and pattern.fullmatch(name):
                return role
        return None


def _role(nic: NicFacts, gpu_numa: frozenset[int], infiniband_node: bool, rules: NicRoleRules) -> NicRole | None:
    named = rules.named(nic.name)
    if named is not None:
        return named
    if nic.default_route:
        return NicRole.FRONT_END
    if nic.nearest_gpu in _BESIDE_A_GPU:
        return NicRole.COMPUTE
    if gpu_numa and nic.numa_node is not None and nic.numa_node not in gpu_numa:
        return NicRole.STORAGE
    if nic.link_layer == _INFINIBAND:
        return NicRole.COMPUTE
    if nic.link_layer == _ETHERNET:
        if not infiniband_node:
            return NicRole.COMPUTE
        return NicRole.FRONT_END if nic.bluefield else NicRole.STORAGE
    return None


def nic_roles(
    nics: Sequence[NicFacts], gpu_numa_nodes: Iterable[int | None], rules: NicRoleRules | None = None
) -> dict[str, NicRole | None]:
    """Each NIC's role by name (see the module's rules); ``gpu_numa_nodes`` are the GPUs' NUMA nodes."""
    gpu_numa = frozenset(n for n in gpu_numa_nodes if n is not None)
    if not any(n.numa_node in gpu_numa for n in nics if n.numa_node is not None):
        gpu_numa = frozenset()  # no NIC near any GPU: the numbers are not sockets, so they decide nothing
    infiniband_node = any(n.link_layer == _INFINIBAND for n in nics)
    return {n.name: _role(n, gpu_numa, infiniband_node, rules or NicRoleRules()) for n in nics}
