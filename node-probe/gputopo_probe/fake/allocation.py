"""What a device plugin would have given each pod, for fake nodes (item 7 of the probe in fake mode).

``plan``: honour the operator's plan (annotation ``gputopo.io/gpus``) when those GPUs are free, else fall back
to the device plugin's choice. ``device-plugin``: ignore the plan, as NVIDIA's device plugin does. The
device plugin's choice is the operator's own model of it (``gputopo.topology.device_plugin``: go-gpuallocator's
best-effort policy on the node's free GPUs), so a sandbox in this mode shows what the operator predicts.

In both modes a GPU the device plugin reports Unhealthy (one with an XID, as the fake device plugin of a kind
node reports it) is never handed out: the kubelet allocates only healthy devices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, Literal

from gputopo.api.gpus import GpuCountError, pod_gpus
from gputopo.api.group import ANNOTATION_GPUS
from gputopo.api.nodepodgpus import PodGpus
from gputopo.topology.device_plugin import kubelet_choice
from gputopo.topology.model import Topology

__all__ = ["AllocationMode", "FakeAllocator", "gpu_request"]

AllocationMode = Literal["plan", "device-plugin"]
_TERMINAL: Final = ("Succeeded", "Failed")


def gpu_request(pod: Mapping[str, Any]) -> int:
    """The pod's GPU count as the operator reads it; a count that is not whole reads as none."""
    spec = pod.get("spec")
    try:
        return pod_gpus(spec if isinstance(spec, Mapping) else {}) or 0
    except GpuCountError:
        return 0


def _planned(pod: Mapping[str, Any]) -> list[int] | None:
    text = (pod.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_GPUS)
    if not text:
        return None
    try:
        return sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        return None


def _key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """A pod as the kubelet knows it: by UID, since a pod deleted and created again keeps its name."""
    meta = pod.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")))


class FakeAllocator:
    """The fake kubelet device manager of one node: pods in, GPU indices out; thread-safe."""

    def __init__(
        self,
        topology: Topology,
        mode: AllocationMode = "plan",
        unhealthy: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.topology = topology
        self.mode = mode
        self.unhealthy = unhealthy
        """The GPU indices the device plugin reports Unhealthy now; read at each allocation."""
        self._held: dict[tuple[str, str, str], list[int]] = {}  # (namespace, name, uid) -> GPUs
        self._lock = threading.Lock()

    def free(self) -> list[int]:
        """The GPUs the kubelet may hand out: healthy, and held by no pod."""
        used = {g for gpus in self._held.values() for g in gpus} | set(self.unhealthy())
        return [g.index for g in self.topology.gpus if g.index not in used]

    def observe(self, event: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata", {})
        key = _key(pod)
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            if event == "DELETED" or phase in _TERMINAL or meta.get("deletionTimestamp"):
                self._held.pop(key, None)
                return
            if key in self._held or not pod.get("spec", {}).get("nodeName"):
                return
            size = gpu_request(pod)
            if size <= 0:
                return
            free = self.free()
            plan = _planned(pod) if self.mode == "plan" else None
            if plan is not None and len(plan) == size and set(plan) <= set(free):
                self._held[key] = plan
                return
            chosen = kubelet_choice(self.topology, free, size)
            if chosen is not None:  # None: the kubelet would fail the pod's admission
                self._held[key] = list(chosen)

    def resync(self, pods: list[Mapping[str, Any]]) -> None:
        """Make the held set match a fresh list of the node's pods: a pod deleted while no watch ran is let go."""
        present = {_key(p) for p in pods}
        with self._lock:
            for key in set(self._held) - present:
                del self._held[key]
        for pod in pods:
            self.observe("ADDED", pod)

    def pods(self) -> list[PodGpus]:
        with self._lock:
            return [PodGpus(namespace=ns, name=name, gpus=list(g)) for (ns, name, _), g in sorted(self._held.items())]
