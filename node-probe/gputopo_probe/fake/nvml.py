"""A fake NVML: the pynvml functions the probe calls, answered from a topology, with injectable faults.

An instance stands in for the ``pynvml`` module (``Nvml(FakeNvml(...))``); it is a class, not a module, so
that a probe farm can hold a thousand of them. Errors are raised as real ``pynvml.NVMLError`` subclasses so
the probe's error translation runs exactly as on hardware.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import uuid
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Final

import pynvml

from gputopo.api.nodetopology import FabricState, LinkKind
from gputopo.topology.fabric import health_mask
from gputopo.topology.model import Fabric, Topology, pair
from gputopo_probe.fake.numa import numa_layout
from gputopo_probe.fake.pcitree import Device, PciTree
from gputopo_probe.nvml import ARCHITECTURES
from gputopo_probe.pcie import PciPath, pcie_distance

__all__ = ["C2C_FIELDS", "FakeDevice", "FakeNvml", "architecture_of", "nvml_bus_id"]

_LEVEL: Final = {LinkKind.PIX: 10, LinkKind.PXB: 20, LinkKind.PHB: 30, LinkKind.NODE: 40, LinkKind.SYS: 50}
_NVLINK_ENUM: Final = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}
_ARCH_NVLINK: Final = {4: 1, 5: 2, 6: 2, 7: 3, 9: 4, 10: 5}
_MODEL_ARCH: Final = (
    (("GB200", "B200", "B100", "GB300", "B300"), 10),
    (("H100", "H200", "H800", "H20", "GH200"), 9),
    (("L40", "4090", "RTX 40", "L4", "ADA"), 8),
    (("A100", "A800", "A30", "A40", "A10", "3090", "A6000", "RTX 30"), 7),
    (("TITAN RTX", "T4", "2080", "RTX 20"), 6),
    (("V100",), 5),
    (("P100",), 4),
)
_FI_STATE, _FI_RECOVERY_ACTION = 165, 230
_FI_ERRORS: Final = (38, 45, 52, 59)  # CRC flit, CRC data, replay, recovery totals
_FI_REPLAY: Final = 52
_FI_C2C_COUNT, _FI_C2C_STATUS, _FI_C2C_MAX_BW = 170, 171, 172
# Put in ``FakeNvml.unsupported`` to make the C2C field values answer NOT_SUPPORTED (the others still answer).
C2C_FIELDS: Final = "nvmlDeviceGetFieldValues:C2C"
_HOT_REASONS: Final = 0x20 | 0x40 | 0x8  # SW thermal, HW thermal, HW slowdown
_TIMEOUT: Final = pynvml.NVML_ERROR_TIMEOUT


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def nvml_bus_id(bdf: str) -> str:
    """sysfs ``0000:07:00.0`` -> NVML's ``00000000:07:00.0``."""
    domain, bus, rest = bdf.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def architecture_of(model: str, architecture: str, nvlink_version: int) -> int:
    for value, name in ARCHITECTURES.items():
        if architecture and name.lower() == architecture.lower():
            return value
    upper = model.upper()
    for needles, value in _MODEL_ARCH:
        if any(n in upper for n in needles):
            return value
    by_nvlink = {gen: arch for arch, gen in _ARCH_NVLINK.items()}
    return by_nvlink.get(nvlink_version, 0xFFFFFFFF)


def _fake_uuid(node: str, model: str, index: int) -> str:
    """The same UUID in every process (a kubelet keeps device ids across restarts of the probe), one per node."""
    digest = int(hashlib.sha256(f"{node}/{model}/{index}".encode()).hexdigest()[:12], 16) % 10**12
    return f"GPU-{index:08x}-fake-{digest:012d}"


@dataclass
class _Port:
    remote_bdf: str
    switch: bool
    peer: int | None


@dataclass
class FakeDevice:
    index: int
    uuid: str
    name: str
    arch: int
    memory_mib: int
    pci: Device
    nvlink_enum: int
    ports: list[_Port] = field(default_factory=list)
    c2c_links: int = 0
    c2c_link_mbps: int = 0  # per link, as NVML_FI_DEV_C2C_LINK_GET_MAX_BW gives it
    cpus: tuple[int, ...] = ()  # its ideal CPU affinity
    memory_node: int | None = None  # a C2C GPU's own memory's NUMA node


class _Value:
    __slots__ = ("ullVal",)

    def __init__(self, value: int) -> None:
        self.ullVal = value


class _Field:
    """The shape of pynvml's ``c_nvmlFieldValue_t`` that the probe reads."""

    __slots__ = ("fieldId", "nvmlReturn", "scopeId", "value")

    def __init__(self, field_id: int, scope: int, ret: int, value: int) -> None:
        self.fieldId, self.scopeId, self.nvmlReturn, self.value = field_id, scope, ret, _Value(value)


@dataclass
class _EventSet:
    devices: set[int] = field(default_factory=set)


class FakeNvml:
    """Holds the fault state the fake node writes into it (``down``, ``broken_p2p``, ``hot``, …)."""

    BACKEND: Final = "fake"

    def __init__(self, topology: Topology, tree: PciTree, *, hide_switches: bool = False, node: str = "") -> None:
        self.node = node  # makes GPU UUIDs unique across the fake nodes of one cluster
        self.topology = topology
        self.hide_switches = hide_switches
        self.unsupported: set[str] = set()
        self.lost: set[int] = set()
        self.down: set[tuple[int, int]] = set()  # (gpu, link) reading inactive
        self.erroring: set[tuple[int, int]] = set()  # (gpu, link) whose replay counter climbs
        self.broken_p2p: set[tuple[int, int]] = set()
        self.hot: set[int] = set()
        self.xid: dict[int, int] = {}  # GPU -> XID whose recovery action is pending
        self.fabric_faults: dict[int, str] = {}  # GPU -> "degraded" (less bandwidth) or "down" (not registered)
        self._replays: dict[tuple[int, int], int] = {}
        self._events: list[tuple[int, int]] = []
        self._event_sets: list[_EventSet] = []
        self._event_ready = threading.Condition()
        self.switch_bdfs = [s.bdf for s in tree.switches]
        self.devices = [self._device(i, tree) for i in range(topology.gpu_count)]
        layout = numa_layout(topology, tree)
        for device in self.devices:
            device.cpus = tuple(layout.cpus_of(device.index))
            device.memory_node = layout.gpu_memory_node[device.index]
        self._wire_nvlinks()

    # -- construction --------------------------------------------------------------------------------------

    def _device(self, i: int, tree: PciTree) -> FakeDevice:
        gpu = self.topology.gpus[i]
        arch = architecture_of(gpu.model, gpu.architecture, gpu.nvlink_version)
        generation = gpu.nvlink_version or _ARCH_NVLINK.get(arch, 3)
        return FakeDevice(
            index=i,
            uuid=gpu.uuid or _fake_uuid(self.node, gpu.model or "", i),
            name=gpu.model or "NVIDIA GPU",
            arch=arch,
            memory_mib=gpu.memory_mib or 81559,
            pci=tree.gpus[i],
            nvlink_enum=_NVLINK_ENUM.get(generation, 4),
            c2c_links=gpu.c2c_links,
            c2c_link_mbps=round(gpu.c2c_gbps * 1000 / gpu.c2c_links) if gpu.c2c_links else 0,
        )

    def _wire_nvlinks(self) -> None:
        devices = self.devices
        for (a, b), link in sorted(self.topology.links.items()):
            if link.kind is LinkKind.NVLINK:
                for _ in range(link.nvlinks):
                    devices[a].ports.append(_Port(devices[b].pci.bdf, False, b))
                    devices[b].ports.append(_Port(devices[a].pci.bdf, False, a))
        switched: dict[int, int] = {}
        for (a, b), link in self.topology.links.items():
            if link.kind is LinkKind.NVSWITCH:
                switched[a] = max(switched.get(a, 0), link.nvlinks)
                switched[b] = max(switched.get(b, 0), link.nvlinks)
        for gpu, count in sorted(switched.items()):
            for n in range(count):
                remote = self.switch_bdfs[n % len(self.switch_bdfs)] if self.switch_bdfs else ""
                devices[gpu].ports.append(_Port(remote, True, None))

    def ports_to(self, gpu: int, peer: int | None) -> list[int]:
        """Link numbers of ``gpu`` that go to ``peer`` (None: to NVSwitches)."""
        return [n for n, p in enumerate(self.devices[gpu].ports) if p.peer == peer and p.switch == (peer is None)]

    # -- helpers -------------------------------------------------------------------------------------------

    def _dev(self, handle: Any, call: str) -> FakeDevice:
        if call in self.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        device: FakeDevice = handle
        if device.index in self.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return device

    def _port(self, handle: Any, link: int, call: str) -> tuple[FakeDevice, _Port]:
        device = self._dev(handle, call)
        if not 0 <= link < len(device.ports):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED if link >= 0 else pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device, device.ports[link]

    def _active(self, device: FakeDevice, link: int) -> bool:
        return (device.index, link) not in self.down

    # -- system --------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        if "nvmlSystemGetDriverVersion" in self.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.topology.system.driver_version or "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        major, _, minor = (self.topology.system.cuda_driver_version or "12.4").partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    # -- devices -------------------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:  # noqa: N802
        if not 0 <= index < len(self.devices):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.devices[index]

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:  # noqa: N802
        device = self._dev(handle, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=nvml_bus_id(device.pci.bdf).encode())

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:  # noqa: N802
        """A fake GPU is /dev/nvidia<index> (the fake DRA driver names it gpu-<index>)."""
        return self._dev(handle, "nvmlDeviceGetMinorNumber").index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802
        return self._dev(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: N802
        return self._dev(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:  # noqa: N802
        return self._dev(handle, "nvmlDeviceGetArchitecture").arch

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # noqa: N802
        total = self._dev(handle, "nvmlDeviceGetMemoryInfo").memory_mib * 1024 * 1024
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:  # noqa: N802
        """A C2C GPU's own memory node (nvidia-smi's "GPU NUMA ID"), not its CPU's; x86: GPUs are not NUMA nodes."""
        device = self._dev(handle, "nvmlDeviceGetNumaNodeId")
        if device.memory_node is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device.memory_node

    def _cpu_set(self, device: FakeDevice, size: int) -> Any:
        """pynvml's answer: ``size`` 64-bit words, CPU n at bit n % 64 of word n // 64 (CPUs past them cut off)."""
        if size <= 0:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        words = (ctypes.c_ulonglong * size)()
        for cpu in device.cpus:
            if cpu < size * 64:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle: Any, size: int, scope: int) -> Any:  # noqa: N802
        """Node and socket scope alike: a fake node has one NUMA node per CPU socket."""
        return self._cpu_set(self._dev(handle, "nvmlDeviceGetCpuAffinityWithinScope"), size)

    def nvmlDeviceGetCpuAffinity(self, handle: Any, size: int) -> Any:  # noqa: N802
        return self._cpu_set(self._dev(handle, "nvmlDeviceGetCpuAffinity"), size)

    def nvmlDeviceGetC2cModeInfoV(self, handle: Any) -> Any:  # noqa: N802
        """A GPU without C2C answers NOT_SUPPORTED, as a PCIe GPU does."""
        device = self._dev(handle, "nvmlDeviceGetC2cModeInfoV")
        if not device.c2c_links:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(isC2cEnabled=1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:  # noqa: N802
        arch = self._dev(handle, "nvmlDeviceGetMaxPcieLinkGeneration").arch
        return 5 if arch in (9, 10) else 4 if arch in (7, 8) else 3

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:  # noqa: N802
        self._dev(handle, "nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    # -- NVLink --------------------------------------------------------------------------------------------

    def nvmlDeviceGetNvLinkCapability(self, handle: Any, link: int, capability: int) -> int:  # noqa: N802
        self._port(handle, link, "nvmlDeviceGetNvLinkCapability")
        return 1

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:  # noqa: N802
        device, _ = self._port(handle, link, "nvmlDeviceGetNvLinkState")
        return 1 if self._active(device, link) else 0

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:  # noqa: N802
        return self._port(handle, link, "nvmlDeviceGetNvLinkVersion")[0].nvlink_enum

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:  # noqa: N802
        _, port = self._port(handle, link, "nvmlDeviceGetNvLinkRemotePciInfo")
        hidden = port.switch and (self.hide_switches or not port.remote_bdf)
        return SimpleNamespace(busId=b"" if hidden else nvml_bus_id(port.remote_bdf).encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:  # noqa: N802
        _, port = self._port(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType")
        if self.hide_switches:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 0x02 if port.switch else 0x00

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:  # noqa: N802
        device, _ = self._port(handle, link, "nvmlDeviceGetNvLinkErrorCounter")
        return self._replay(device.index, link) if counter == 0 else 0

    def _replay(self, gpu: int, link: int) -> int:
        key = (gpu, link)
        if key in self.erroring:
            self._replays[key] = self._replays.get(key, 0) + 7
        return self._replays.get(key, 0)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[Any]) -> list[Any]:  # noqa: N802
        device = self._dev(handle, "nvmlDeviceGetFieldValues")
        out = []
        for entry in field_ids:
            fid, scope = entry if isinstance(entry, tuple) else (entry, 0)
            ret, value = 0, 0
            if fid == _FI_STATE:
                if 0 <= scope < len(device.ports):
                    value = 1 if self._active(device, scope) else 0
                else:
                    ret = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif fid == _FI_REPLAY:
                if self.erroring or self._replays:
                    value = sum(self._replay(device.index, n) for n in range(len(device.ports)))
            elif fid in _FI_ERRORS:
                value = 0
            elif fid == _FI_RECOVERY_ACTION:
                value = 1 if device.index in self.xid else 0  # GPU_RESET while an XID is pending
            elif fid in (_FI_C2C_COUNT, _FI_C2C_STATUS, _FI_C2C_MAX_BW):
                ret, value = self._c2c_field(device, fid, scope)
            else:
                ret = pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(_Field(fid, scope, ret, value))
        return out

    def _c2c_field(self, device: FakeDevice, fid: int, scope: int) -> tuple[int, int]:
        if C2C_FIELDS in self.unsupported or not device.c2c_links:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        if fid == _FI_C2C_COUNT:
            return 0, device.c2c_links
        if not 0 <= scope < device.c2c_links:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
        return 0, 1 if fid == _FI_C2C_STATUS else device.c2c_link_mbps

    # -- PCIe and P2P --------------------------------------------------------------------------------------

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: Any, h2: Any) -> int:  # noqa: N802
        a = self._dev(h1, "nvmlDeviceGetTopologyCommonAncestor")
        b = self._dev(h2, "nvmlDeviceGetTopologyCommonAncestor")
        link = self.topology.link(a.index, b.index)
        if link.kind in _LEVEL:
            return _LEVEL[link.kind]
        pa = PciPath(a.pci.root, a.pci.bridges, a.pci.bdf, a.pci.numa_node)
        pb = PciPath(b.pci.root, b.pci.bridges, b.pci.bdf, b.pci.numa_node)
        return _LEVEL[pcie_distance(pa, pb)]

    def nvmlDeviceGetP2PStatus(self, h1: Any, h2: Any, index: int) -> int:  # noqa: N802
        a = self._dev(h1, "nvmlDeviceGetP2PStatus")
        b = self._dev(h2, "nvmlDeviceGetP2PStatus")
        if pair(a.index, b.index) in self.broken_p2p:
            return 5  # NVML_P2P_STATUS_NOT_SUPPORTED
        if index == 2:
            return 0 if self.topology.link(a.index, b.index).is_nvlink else 5
        return 0

    # -- multi-node NVLink fabric -----------------------------------------------------------------------------

    _FABRIC_STATE: Final = {
        FabricState.NOT_SUPPORTED: 0,
        FabricState.NOT_STARTED: 1,
        FabricState.IN_PROGRESS: 2,
        FabricState.COMPLETED: 3,
    }

    def fabric(self, gpu: int) -> Fabric | None:
        """The GPU's fabric info as NVML reports it now: the topology's, with its fault applied."""
        fabric = self.topology.gpus[gpu].fabric
        fault = self.fabric_faults.get(gpu)
        if fabric is None or fault is None:
            return fabric
        if fault == "down":  # the fabric manager lost the GPU: it registers again from scratch
            return replace(fabric, state=FabricState.NOT_STARTED, health_mask=health_mask(gfm_connected=False))
        return replace(fabric, health_mask=health_mask(degraded_bw=True), health_summary=3)  # limited capacity

    def _fill_fabric(self, handle: Any, target: Any, call: str) -> None:
        device = self._dev(handle, call)
        fabric = self.fabric(device.index)
        if fabric is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = getattr(target, "_obj", target)  # ctypes.byref(struct), as the C call takes it
        data = uuid.UUID(fabric.cluster_uuid).bytes if fabric.cluster_uuid else bytes(16)
        for n, byte in enumerate(data):
            info.clusterUuid[n] = byte
        info.status = fabric.status
        info.cliqueId = fabric.clique_id
        info.state = self._FABRIC_STATE[fabric.state]
        if hasattr(info, "healthMask"):
            info.healthMask = fabric.health_mask
        if hasattr(info, "healthSummary"):
            info.healthSummary = fabric.health_summary

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, target: Any) -> int:  # noqa: N802
        self._fill_fabric(handle, target, "nvmlDeviceGetGpuFabricInfoV")
        return 0

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, target: Any) -> int:  # noqa: N802
        self._fill_fabric(handle, target, "nvmlDeviceGetGpuFabricInfo")
        return 0

    # -- health --------------------------------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:  # noqa: N802
        return 93 if self._dev(handle, "nvmlDeviceGetTemperature").index in self.hot else 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:  # noqa: N802
        return _HOT_REASONS if self._dev(handle, "nvmlDeviceGetCurrentClocksEventReasons").index in self.hot else 0

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:  # noqa: N802
        device = self._dev(handle, "nvmlDeviceGetTotalEccErrors")
        return 1 if error_type == 1 and self.xid.get(device.index) == 48 else 0

    # -- events --------------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        event_set = _EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:  # noqa: N802
        device = self._dev(handle, "nvmlDeviceRegisterEvents")
        event_set.devices.add(device.index)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:  # noqa: N802
        with self._event_ready:
            if not self._events and timeout_ms > 0:
                self._event_ready.wait(timeout_ms / 1000)
            for n, (gpu, xid) in enumerate(self._events):
                if gpu in event_set.devices:
                    del self._events[n]
                    return SimpleNamespace(
                        device=self.devices[gpu],
                        eventType=pynvml.nvmlEventTypeXidCriticalError,
                        eventData=xid,
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
        raise _error(_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:  # noqa: N802
        if event_set in self._event_sets:
            self._event_sets.remove(event_set)

    @property
    def pending_events(self) -> bool:
        return bool(self._events)

    def raise_xid(self, gpu: int, xid: int) -> None:
        with self._event_ready:
            self._events.append((gpu, xid))
            self._event_ready.notify_all()
