"""A fake node's ResourceSlice, written the way NVIDIA's DRA driver writes its own (gpu.nvidia.com).

The driver (kubernetes-sigs/dra-driver-nvidia-gpu) publishes one slice per node: pool = node name, one
device per whole GPU named ``gpu-<minor>`` (the ``/dev/nvidia<minor>`` number; a fake GPU's minor is its
index), with the attributes ``type`` ("gpu"), ``uuid``, ``productName``, ``architecture``, ``driverVersion``
and the standard ``resource.kubernetes.io/pciBusID``, and its memory as capacity. ``driverVersion`` is a
version attribute, which the API server accepts only as strict semver: the driver passes NVML's version
through a lenient semver parser, so ``570.158.01`` is published as ``570.158.1`` and ``550.54`` as
``550.54.0``. Here a GPU the probe reads as unhealthy is withdrawn from the slice, so kube-scheduler allocates
it to nobody new.

``resource_slice`` is pure (a topology in, a slice body out); ``FakeDraDriver`` writes it on change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from gputopo.api.group import DRA_DRIVER
from gputopo.topology.model import Gpu, Topology

__all__ = ["FakeDraDriver", "device_name", "driver_version", "resource_slice", "slice_name"]

_NVML_VERSION = re.compile(r"^\d+(\.\d+){0,2}$")


def slice_name(node: str) -> str:
    return f"{node}-{DRA_DRIVER}"


def device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}"


def driver_version(nvml: str) -> str | None:
    """NVML's driver version as a strict semver string (leading zeros dropped, missing parts 0); None when it
    is not one to three dot-separated numbers."""
    if not _NVML_VERSION.match(nvml):
        return None
    parts = [str(int(part)) for part in nvml.split(".")]
    return ".".join([*parts, *["0"] * (3 - len(parts))])


def _device(gpu: Gpu, driver_version: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}}
    if gpu.model:
        attributes["productName"] = {"string": gpu.model[:64]}
    if gpu.architecture:
        attributes["architecture"] = {"string": gpu.architecture[:64]}
    if driver_version is not None:
        attributes["driverVersion"] = {"version": driver_version}
    if gpu.pci_bus_id:
        attributes["resource.kubernetes.io/pciBusID"] = {"string": gpu.pci_bus_id.lower()}
    device: dict[str, Any] = {"name": device_name(gpu), "attributes": attributes}
    if gpu.memory_mib:
        device["capacity"] = {"memory": {"value": f"{gpu.memory_mib}Mi"}}
    return device


def resource_slice(node: str, node_uid: str, topology: Topology, generation: int) -> dict[str, Any]:
    """The node's slice: a device per healthy GPU with a UUID (the driver cannot publish one without)."""
    meta: dict[str, Any] = {"name": slice_name(node)}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    version = driver_version(topology.system.driver_version)
    devices = [_device(g, version) for g in topology.gpus if g.healthy and g.uuid]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class SliceWriter(Protocol):
    def apply_resource_slice(self, body: dict[str, Any]) -> None: ...


class FakeDraDriver:
    """One node's fake driver: writes the node's slice when its devices change, with the pool's next generation.

    With ``reassert_s`` it also writes the unchanged slice again that often (an apply that changes nothing is
    free): a real kubelet deletes its node's slices when it starts and when a driver's plugin stays away, and
    a driver must publish them again, as NVIDIA's does.
    """

    def __init__(
        self, writer: SliceWriter, *, reassert_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.writer = writer
        self.reassert_s = reassert_s
        self.clock = clock
        self.generation = 0
        self._devices: list[Any] | None = None
        self._written = 0.0

    def publish(self, node: str, node_uid: str, topology: Topology) -> None:
        generation = self.generation + 1
        body = resource_slice(node, node_uid, topology, generation)
        now = self.clock()
        if body["spec"]["devices"] == self._devices:
            if self.reassert_s is None or now - self._written < self.reassert_s:
                return
            generation = body["spec"]["pool"]["generation"] = self.generation  # the same devices, generation
        self.writer.apply_resource_slice(body)
        self._devices = body["spec"]["devices"]
        self.generation, self._written = generation, now
