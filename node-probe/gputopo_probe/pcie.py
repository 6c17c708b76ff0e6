"""PCIe distance between two devices from their sysfs paths, the way nvidia-smi names it.

A device's real path looks like ``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0``:
the root complex, then the bridges down to the device. Same switch -> PIX; a common bridge below the root
port -> PXB; the same root complex -> PHB; another root complex on the same NUMA node -> NODE; else SYS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gputopo.api.nodetopology import LinkKind

__all__ = ["PciPath", "pcie_distance"]

_BDF: Final = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ROOT: Final = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


@dataclass(frozen=True, slots=True)
class PciPath:
    """Where a PCI device sits: its root complex, the bridges above it, its NUMA node (None if unknown)."""

    root: str
    bridges: tuple[str, ...]
    device: str
    numa_node: int | None = None

    @classmethod
    def parse(cls, real_path: str, numa_node: int | None = None) -> PciPath:
        parts = [p.lower() for p in real_path.split("/") if p]
        roots = [i for i, p in enumerate(parts) if _ROOT.match(p)]
        if not roots:
            raise ValueError(f"not a PCI device path: {real_path}")
        start = roots[-1]
        chain = [p for p in parts[start + 1 :] if _BDF.match(p)]
        if not chain:
            raise ValueError(f"no PCI device under {parts[start]} in {real_path}")
        return cls(parts[start], tuple(chain[:-1]), chain[-1], numa_node)


def pcie_distance(a: PciPath, b: PciPath) -> LinkKind:
    if a.root != b.root:
        same_numa = a.numa_node == b.numa_node or a.numa_node is None or b.numa_node is None
        return LinkKind.NODE if same_numa else LinkKind.SYS
    common = 0
    for x, y in zip(a.bridges, b.bridges, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return LinkKind.PHB
    if len(a.bridges) - common <= 1 and len(b.bridges) - common <= 1:
        return LinkKind.PIX
    return LinkKind.PXB
