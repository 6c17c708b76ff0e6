"""sysfs readers: PCI device paths, NUMA nodes and their CPUs, RDMA NICs under class/infiniband, GPUDirect
RDMA; and from procfs, which network devices carry the default route.

Every path is under ``root`` (``/sys`` on a node, a temporary tree in tests) or ``proc_root``, so the same code
reads both. The route table is PID 1's (``<proc_root>/1/net/route``): the host's, also from a pod that is not
on the host network but has the host's ``/proc/1/net`` mounted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gputopo_probe.errors import SysfsError
from gputopo_probe.pcie import PciPath

__all__ = [
    "NVSWITCH_PCI_CLASS",
    "NicPort",
    "Sysfs",
    "default_route_devices",
    "parse_cpulist",
    "parse_rate_gbps",
    "parse_state",
]

NVSWITCH_PCI_CLASS: Final = 0x068000
_GDR_MARKERS: Final = (
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
)


def default_route_devices(route: str, ipv6_route: str = "") -> frozenset[str]:
    """The devices of the default routes in ``/proc/net/route`` and ``/proc/net/ipv6_route`` text.

    IPv4: destination and mask ``00000000``, the route up (flag 0x1). IPv6: destination ``::/0`` not on ``lo``
    (where the kernel keeps its unreachable default).
    """
    devices: set[str] = set()
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, destination, flags, mask = fields[0], fields[1], fields[3], fields[7]
        try:
            up = int(flags, 16) & 0x1
        except ValueError:
            continue
        if destination == "00000000" and mask == "00000000" and up:
            devices.add(iface)
    for line in ipv6_route.splitlines():
        fields = line.split()
        if len(fields) >= 10 and fields[1] == "00" and not fields[0].strip("0") and fields[9] != "lo":
            devices.add(fields[9])
    return frozenset(devices)


def parse_cpulist(text: str) -> frozenset[int]:
    """The kernel's CPU list: ``0-71`` -> CPUs 0 to 71, ``0-3,8-11``; '' (a node without CPUs) -> none.
    ``ValueError`` for text that is not a CPU list."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, dash, last = part.partition("-")
        low, high = int(first), int(last) if dash else int(first)
        if low < 0 or high < low:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def parse_state(text: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``."""
    return text.partition(":")[2].strip() if ":" in text else text.strip()


def parse_rate_gbps(text: str) -> float:
    """``400 Gb/sec (4X NDR)`` -> 400.0; unreadable -> 0."""
    head = text.strip().split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        return 0.0


@dataclass(frozen=True, slots=True)
class NicPort:
    """One RDMA device's first usable port as sysfs shows it; ``link_layer`` is '' where sysfs does not say."""

    name: str
    port: int
    state: str
    phys_state: str
    rate_gbps: float
    link_layer: str
    pci: PciPath | None
    netdevs: tuple[str, ...] = ()
    """The device's network interfaces and the bonds or bridges above them (``master``), nearest first."""
    pci_id: tuple[int, int] | None = None
    """PCI (vendor, device) of the NIC's function, None where unreadable."""

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


class Sysfs:
    def __init__(self, root: str | Path = "/sys", proc_root: str | Path | None = "/proc") -> None:
        """``proc_root`` None or '': no route table to read (the default route is then unknown)."""
        self.root = Path(root)
        self.proc_root = Path(proc_root) if proc_root else None

    def _read(self, path: Path) -> str:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                return f.read().strip()
        except OSError as error:
            raise SysfsError(f"cannot read {path}: {error.strerror}") from error

    def _read_or(self, path: Path, default: str) -> str:
        try:
            return self._read(path)
        except SysfsError:
            return default

    # -- PCI -----------------------------------------------------------------------------------------------

    def pci_device(self, bdf: str) -> Path:
        return self.root / "bus" / "pci" / "devices" / bdf

    def numa_node(self, device_dir: Path) -> int | None:
        try:
            value = int(self._read_or(device_dir / "numa_node", "-1"))
        except ValueError:
            return None
        return value if value >= 0 else None

    def pci_path(self, bdf: str) -> PciPath | None:
        """The PCI path of a device by bus id, or None where sysfs does not show it (a VM, say)."""
        return self._path_of(self.pci_device(bdf))

    def _path_of(self, device_dir: Path) -> PciPath | None:
        if not device_dir.exists():
            return None
        try:
            return PciPath.parse(os.path.realpath(device_dir), self.numa_node(device_dir))
        except ValueError:
            return None

    def pci_class(self, bdf: str) -> int | None:
        text = self._read_or(self.pci_device(bdf) / "class", "")
        try:
            return int(text, 16) if text else None
        except ValueError:
            return None

    # -- NUMA nodes ----------------------------------------------------------------------------------------

    def node_cpus(self) -> dict[int, frozenset[int]]:
        """Each NUMA node's CPUs (``devices/system/node/node<N>/cpulist``): empty for a node of memory only, such
        as a Grace GPU's own. A node whose list cannot be read is left out; no nodes at all when sysfs lists none."""
        base = self.root / "devices" / "system" / "node"
        try:
            names = [p.name for p in base.iterdir()]
        except OSError:
            return {}
        out: dict[int, frozenset[int]] = {}
        for name in names:
            number = name.removeprefix("node")
            if name == number or not (number.isascii() and number.isdigit()):
                continue  # has_cpu, online, possible, power …
            try:
                out[int(number)] = parse_cpulist(self._read(base / name / "cpulist"))
            except (SysfsError, ValueError):
                continue
        return dict(sorted(out.items()))

    # -- RDMA NICs -----------------------------------------------------------------------------------------

    def nic_names(self) -> list[str]:
        base = self.root / "class" / "infiniband"
        try:
            return sorted(p.name for p in base.iterdir())
        except OSError:
            return []

    def nic_port(self, name: str) -> NicPort | None:
        """The NIC's first port (data NICs have one per device; mlx5 exposes one device per port)."""
        base = self.root / "class" / "infiniband" / name
        ports_dir = base / "ports"
        try:
            ports = sorted(int(p.name) for p in ports_dir.iterdir() if p.name.isdigit())
        except OSError:
            return None
        if not ports:
            return None
        port = ports[0]
        pdir = ports_dir / str(port)
        return NicPort(
            name=name,
            port=port,
            state=parse_state(self._read_or(pdir / "state", "0: NOP")),
            phys_state=parse_state(self._read_or(pdir / "phys_state", "0: Unknown")),
            rate_gbps=parse_rate_gbps(self._read_or(pdir / "rate", "0")),
            link_layer=self._read_or(pdir / "link_layer", ""),
            pci=self._path_of(base / "device"),
            netdevs=self._netdevs(base / "device" / "net"),
            pci_id=self._pci_id(base / "device"),
        )

    def _netdevs(self, net_dir: Path) -> tuple[str, ...]:
        try:
            own = sorted(p.name for p in net_dir.iterdir())
        except OSError:
            return ()
        out: list[str] = []
        for name in own:
            while name and name not in out:  # a bond's slave, a bridge's port: the route names the upper one
                out.append(name)
                name = self._master(name)
        return tuple(out)

    def _master(self, netdev: str) -> str:
        try:
            return os.path.basename(os.readlink(self.root / "class" / "net" / netdev / "master"))
        except OSError:
            return ""

    def _pci_id(self, device_dir: Path) -> tuple[int, int] | None:
        try:
            return int(self._read(device_dir / "vendor"), 16), int(self._read(device_dir / "device"), 16)
        except (SysfsError, ValueError):
            return None

    # -- routes ------------------------------------------------------------------------------------------------

    def default_route_devices(self) -> frozenset[str] | None:
        """The network devices the host's default routes leave through; None when the route table is unreadable."""
        if self.proc_root is None:
            return None
        net = self.proc_root / "1" / "net"
        try:
            route = self._read(net / "route")
        except SysfsError:
            return None
        return default_route_devices(route, self._read_or(net / "ipv6_route", ""))

    def nic_state(self, name: str, port: int) -> tuple[str, str] | None:
        """(state, phys_state) of one port; None when the device vanished. Read every poll: plain strings."""
        base = f"{self.root}/class/infiniband/{name}/ports/{port}/"
        try:
            with open(base + "state", encoding="ascii", errors="replace") as f:
                state = f.read()
            with open(base + "phys_state", encoding="ascii", errors="replace") as f:
                phys = f.read()
        except OSError:
            return None
        return parse_state(state), parse_state(phys)

    # -- GPUDirect RDMA ------------------------------------------------------------------------------------

    def gpudirect_rdma(self) -> bool:
        """True when nvidia_peermem (or the legacy nv_peer_mem) is loaded, as NCCL checks it."""
        return any((self.root / marker).exists() for marker in _GDR_MARKERS)
