"""A fake GPU node: a topology, its fake NVML and fake sysfs, and the faults of its fault file applied to them."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.model import Topology
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.fake.faults import FaultStore, NodeFaults
from gputopo_probe.fake.nvml import FakeNvml
from gputopo_probe.fake.pcitree import build_pci_tree
from gputopo_probe.fake.sysfs import FakeSysfs

__all__ = ["FakeNode"]


def _scratch() -> str | None:
    """tmpfs when there is one: a farm writes a sysfs tree per node, and disks make that slow."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _nvswitch_count(topology: Topology) -> int:
    per_gpu = max((link.nvlinks for link in topology.links.values() if link.kind is LinkKind.NVSWITCH), default=0)
    if not per_gpu:
        return 0
    return 4 if per_gpu == 18 else 6


class FakeNode:
    """``sync_faults()`` before each poll makes the fake hardware match the node's fault file."""

    def __init__(
        self,
        name: str,
        topology: Topology,
        *,
        faults: FaultStore | None = None,
        sysfs_root: Path | None = None,
        hide_switches: bool = False,
    ) -> None:
        self.name = name
        self.topology = topology
        self.faults = faults
        self._own_root = sysfs_root is None
        self.sysfs_root = sysfs_root or Path(tempfile.mkdtemp(prefix=f"gputopo-sysfs-{name}-", dir=_scratch()))
        tree = build_pci_tree(topology, _nvswitch_count(topology))
        self.nvml = FakeNvml(topology, tree, hide_switches=hide_switches, node=name)
        self.sysfs = FakeSysfs(self.sysfs_root, topology, tree)
        self._applied = NodeFaults()
        self._xid_seq: dict[int, int] = {}

    def reader(self) -> Sysfs:
        """The probe's sysfs (and procfs) reader of this fake node's tree."""
        return Sysfs(self.sysfs_root, self.sysfs.proc_root)

    def close(self) -> None:
        if self._own_root:
            shutil.rmtree(self.sysfs_root, ignore_errors=True)

    def sync_faults(self) -> bool:
        """Read the fault file (a stat when unchanged) and apply what changed; True when something did."""
        if self.faults is None:
            return False
        current = self.faults.read(self.name)
        if current is self._applied:
            return False
        self.apply(current)
        return True

    def xid_gpus(self) -> set[int]:
        """The GPUs with an XID now, those a device plugin reports Unhealthy (the fake NVML's map is replaced as
        faults change: call this each time)."""
        return set(self.nvml.xid)

    def quiet(self) -> bool:
        """Sync the faults; True when the fake hardware reads exactly as at the last poll (no new faults,
        no climbing error counters, no pending XID): a probe farm may then reuse that poll."""
        changed = self.sync_faults()
        return not changed and not self.nvml.erroring and not self.nvml.pending_events and not self.nvml.lost

    def apply(self, faults: NodeFaults) -> None:
        nvml = self.nvml
        nvml.down.clear()
        nvml.erroring.clear()
        nvml.broken_p2p.clear()
        for (a, b), state in faults.links.items():
            self._apply_link(a, b, state)
        for nic in self.topology.nics:
            self.sysfs.set_nic_up(nic.name, nic.up and faults.nics.get(nic.name) != "down")
        nvml.hot = {i for i, g in faults.gpus.items() if g.hot}
        nvml.xid = {i: g.xid for i, g in faults.gpus.items() if g.xid is not None}
        for i, g in faults.gpus.items():
            if g.xid is not None and g.seq != self._xid_seq.get(i):
                nvml.raise_xid(i, g.xid)
            self._xid_seq[i] = g.seq
        for i in set(self._xid_seq) - set(faults.gpus):
            del self._xid_seq[i]
        nvml.fabric_faults = {g.index: faults.fabric for g in self.topology.gpus if faults.fabric}
        self._applied = faults

    def _apply_link(self, a: int, b: int, state: str) -> None:
        nvml = self.nvml
        if not (0 <= a < b < self.topology.gpu_count):
            return
        link = self.topology.link(a, b)
        if link.kind is LinkKind.NVLINK:
            ends = [(a, n) for n in nvml.ports_to(a, b)], [(b, n) for n in nvml.ports_to(b, a)]
            count = len(ends[0])
            cut = count if state == "down" else count // 2
            for side in ends:
                nvml.down.update(side[:cut])
                if state == "degraded" and cut == 0:
                    nvml.erroring.update(side)
        elif link.kind is LinkKind.NVSWITCH and state == "degraded":
            # Through NVSwitches a pair has no links of its own: losing a third of GPU a's links is what
            # degrades the pair (and every other pair of a, as on hardware).
            ports = nvml.ports_to(a, None)
            nvml.down.update((a, n) for n in ports[: max(1, len(ports) // 3)])
        else:
            nvml.broken_p2p.add((a, b))  # no route between the two GPUs (PCIe, or NVSwitch fabric)
