"""A temporary sysfs tree for a fake node: PCI devices, NUMA nodes with their CPUs, RDMA NICs under
class/infiniband with their network devices, nvidia_peermem; and the host's route table under ``proc/`` beside
it (the default route's NIC)."""

from __future__ import annotations

import os
from pathlib import Path

from gputopo.api.nodetopology import NicRole
from gputopo.topology.model import Nic, Topology
from gputopo_probe.fake.numa import numa_layout
from gputopo_probe.fake.pcitree import Device, PciTree

__all__ = ["FakeSysfs", "fake_netdev", "nic_pci_device", "rate_text"]

_SPEEDS = ((800, "XDR"), (400, "NDR"), (200, "HDR"), (100, "EDR"), (56, "FDR"), (40, "QDR"), (10, "SDR"))
_MELLANOX = 0x15B3
_CONNECTX_7, _CONNECTX_8, _BLUEFIELD_3 = 0x1021, 0x1023, 0xA2DC
_ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def fake_netdev(nic: Nic) -> str:
    """The fake network device of an RDMA NIC; named so that it never matches a real host's interface."""
    return f"{'ib' if nic.link_layer == 'InfiniBand' else 'en'}-{nic.name}"[:15]


def nic_pci_device(nic: Nic) -> int:
    """The PCI device id a fake NIC shows: a BlueField-3 for an Ethernet front-end port that does not carry the
    default route (a DPU's in-band management port), a ConnectX-8 at 800 Gb/s, else a ConnectX-7."""
    if nic.link_layer == "Ethernet" and nic.role is NicRole.FRONT_END and not nic.default_route:
        return _BLUEFIELD_3
    return _CONNECTX_8 if nic.rate_gbps >= 800 else _CONNECTX_7


def rate_text(gbps: float) -> str:
    """The kernel's ``rate`` text: ``400 Gb/sec (4X NDR)``."""
    name = next((n for g, n in _SPEEDS if gbps >= g), "SDR")
    value = int(gbps) if float(gbps).is_integer() else gbps
    return f"{value} Gb/sec (4X {name})"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


class FakeSysfs:
    """Writes the tree once; ``set_nic_up`` flips a port's state files the way a cable pull does."""

    def __init__(self, root: Path, topology: Topology, tree: PciTree) -> None:
        self.root = root
        self.proc_root = root / "proc"
        self._port_dirs: dict[str, Path] = {}
        for device in [*tree.gpus, *tree.switches]:
            self._device(device)
        self._numa_nodes(topology, tree)
        for nic in topology.nics:
            self._nic(nic, self._device(tree.nics[nic.name]))
        self._routes(topology.nics)
        if topology.system.gpudirect_rdma:
            module = root / "module" / "nvidia_peermem"
            module.mkdir(parents=True, exist_ok=True)
            (module / "version").write_text("1.0\n")

    def _device(self, device: Device) -> Path:
        path = self.root / "devices" / device.root
        for bridge in device.bridges:
            path = path / bridge
        path = path / device.bdf
        path.mkdir(parents=True, exist_ok=True)
        # Only what discovery reads: a farm writes one tree per node.
        (path / "class").write_text(f"0x{device.pci_class:06x}\n")
        (path / "numa_node").write_text(f"{device.numa_node if device.numa_node is not None else -1}\n")
        link = self.root / "bus" / "pci" / "devices" / device.bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(path)
        return path

    def _numa_nodes(self, topology: Topology, tree: PciTree) -> None:
        layout = numa_layout(topology, tree)
        lists = {node: f"{cpus[0]}-{cpus[-1]}" for node, cpus in layout.cpus.items()}
        lists.update((node, "") for node in layout.gpu_memory_node if node is not None)
        base = self.root / "devices" / "system" / "node"
        for node, text in lists.items():
            (base / f"node{node}").mkdir(parents=True, exist_ok=True)
            (base / f"node{node}" / "cpulist").write_text(text + "\n")

    def _nic(self, nic: Nic, device_dir: Path) -> None:
        base = self.root / "class" / "infiniband" / nic.name
        port = base / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (base / "device").symlink_to(device_dir)
        (base / "node_type").write_text("1: CA\n")
        (port / "rate").write_text(rate_text(nic.rate_gbps) + "\n")
        (port / "link_layer").write_text(nic.link_layer + "\n")
        (device_dir / "vendor").write_text(f"0x{_MELLANOX:04x}\n")
        (device_dir / "device").write_text(f"0x{nic_pci_device(nic):04x}\n")
        netdev = fake_netdev(nic)
        (device_dir / "net" / netdev).mkdir(parents=True, exist_ok=True)
        (self.root / "class" / "net" / netdev).mkdir(parents=True, exist_ok=True)
        self._port_dirs[nic.name] = port
        self.set_nic_up(nic.name, nic.up)

    def _routes(self, nics: tuple[Nic, ...]) -> None:
        """The host's IPv4 routes: a default route (gateway 192.168.0.1) through each NIC that carries it."""
        lines = [_ROUTE_HEADER]
        for nic in nics:
            if nic.default_route:
                lines.append(f"{fake_netdev(nic)}\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0")
        net = self.proc_root / "1" / "net"
        net.mkdir(parents=True, exist_ok=True)
        (net / "route").write_text("\n".join(lines) + "\n")
        (net / "ipv6_route").write_text("")

    def set_nic_up(self, name: str, up: bool) -> None:
        port = self._port_dirs.get(name)
        if port is None:
            return
        _write(port / "state", "4: ACTIVE" if up else "1: DOWN")
        _write(port / "phys_state", "5: LinkUp" if up else "2: Polling")
