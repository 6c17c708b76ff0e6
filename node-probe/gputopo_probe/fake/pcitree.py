"""A PCI tree that realises a topology's PCIe distances, for the fake sysfs and the fake NVML.

Devices are grouped by the distances the topology knows (NIC to GPU, and GPU pairs over PCIe): NODE-close
devices share a NUMA node, PHB-close ones a root complex, PXB-close ones a root port and switch, PIX-close
ones one switch. ``gputopo_probe.pcie.pcie_distance`` on the resulting paths gives the distances back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import PCIE_LEVELS, Topology

__all__ = ["Device", "PciTree", "build_pci_tree"]

_RANK = {kind: i for i, kind in enumerate(PCIE_LEVELS)}
Key = tuple[str, int | str]  # ("gpu", 3) or ("nic", "mlx5_0")


@dataclass(frozen=True, slots=True)
class Device:
    root: str
    bridges: tuple[str, ...]
    bdf: str
    numa_node: int | None
    pci_class: int


@dataclass
class PciTree:
    gpus: list[Device] = field(default_factory=list)
    nics: dict[str, Device] = field(default_factory=dict)
    switches: list[Device] = field(default_factory=list)
    bridges: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)


class _Buses:
    def __init__(self) -> None:
        self.next = 1

    def bdf(self) -> str:
        bus = self.next
        self.next += 1
        return f"{bus // 256:04x}:{bus % 256:02x}:00.0"


def _groups(members: list[Key], close: dict[Key, set[Key]]) -> list[list[Key]]:
    """Connected components of ``members`` under the ``close`` relation, in first-seen order."""
    seen: set[Key] = set()
    inside = set(members)
    out: list[list[Key]] = []
    for m in members:
        if m in seen:
            continue
        group, stack = [], [m]
        seen.add(m)
        while stack:
            x = stack.pop()
            group.append(x)
            for y in close.get(x, ()):
                if y in inside and y not in seen:
                    seen.add(y)
                    stack.append(y)
        out.append(sorted(group, key=members.index))
    return out


def _edges(topology: Topology) -> Iterable[tuple[Key, Key, LinkKind]]:
    for nic in topology.nics:
        for gpu, kind in enumerate(nic.affinity):
            yield ("nic", nic.name), ("gpu", gpu), kind
    for (a, b), link in topology.links.items():
        if link.kind in _RANK:
            yield ("gpu", a), ("gpu", b), link.kind


def _numa_ids(groups: list[list[Key]], known: dict[Key, int | None], topology: Topology) -> list[tuple[list[Key], int]]:
    """A NUMA node per group: the one its devices report, unless a NIC says SYS between two groups that
    would then share it (real outputs are not always consistent); then another id."""
    sys_pairs = {
        (("nic", n.name), ("gpu", g)) for n in topology.nics for g, k in enumerate(n.affinity) if k is LinkKind.SYS
    }

    def apart(x: list[Key], y: list[Key]) -> bool:
        return any((a, b) in sys_pairs or (b, a) in sys_pairs for a in x for b in y)

    order = sorted(groups, key=lambda g: (not any(m[0] == "nic" for m in g), -len(g)))
    assigned: list[tuple[list[Key], int]] = []
    used = {v for v in known.values() if v is not None}
    for group in order:
        votes: Counter[int] = Counter(v for v in (known[m] for m in group) if v is not None)
        wanted = [v for v, _ in votes.most_common()] + sorted({n for _, n in assigned} - set(votes))
        free = [n for n in wanted if not any(apart(group, g) for g, id_ in assigned if id_ == n)]
        if free:
            numa = free[0]
        else:
            numa = max(used, default=-1) + 1
            used.add(numa)
        assigned.append((group, numa))
    return sorted(assigned, key=lambda item: groups.index(item[0]))


def build_pci_tree(topology: Topology, nvswitches: int = 0) -> PciTree:
    members: list[Key] = [("gpu", g.index) for g in topology.gpus] + [("nic", n.name) for n in topology.nics]
    close: dict[LinkKind, dict[Key, set[Key]]] = {k: {} for k in PCIE_LEVELS}
    for x, y, kind in _edges(topology):
        for level in PCIE_LEVELS[_RANK[kind] :]:
            close[level].setdefault(x, set()).add(y)
            close[level].setdefault(y, set()).add(x)
    known: dict[Key, int | None] = {("gpu", g.index): g.numa_node for g in topology.gpus}
    known.update({("nic", n.name): n.numa_node for n in topology.nics})
    buses = _Buses()
    placed: dict[Key, Device] = {}
    tree = PciTree()
    for numa_group, numa in _numa_ids(_groups(members, close[LinkKind.NODE]), known, topology):
        for rc_group in _groups(numa_group, close[LinkKind.PHB]):
            root = f"pci{buses.bdf()[:7]}"
            for rp_group in _groups(rc_group, close[LinkKind.PXB]):
                upper = (buses.bdf(), buses.bdf())  # root port, switch upstream port
                for sw_group in _groups(rp_group, close[LinkKind.PIX]):
                    switch = (*upper, buses.bdf(), buses.bdf())  # downstream port, next switch upstream
                    for m in sw_group:
                        bridges = (*switch, buses.bdf())
                        for depth in range(1, len(bridges) + 1):
                            tree.bridges.add((root, bridges[:depth]))
                        pci_class = 0x030200 if m[0] == "gpu" else 0x020700
                        placed[m] = Device(root, bridges, buses.bdf(), numa, pci_class)
    tree.gpus = [placed[("gpu", g.index)] for g in topology.gpus]
    tree.nics = {n.name: placed[("nic", n.name)] for n in topology.nics}
    if nvswitches:
        root = f"pci{buses.bdf()[:7]}"
        for _ in range(nvswitches):
            bridge = (buses.bdf(),)
            tree.bridges.add((root, bridge))
            tree.switches.append(Device(root, bridge, buses.bdf(), None, 0x068000))
    return tree
