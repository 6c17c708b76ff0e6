"""What a device plugin would have given each pod, for fake nodes (item 7 of the probe in fake mode).

``plan``: honour the operator's plan (annotation ``gputopo.io/gpus``) when those GPUs are free, else fall back
to the device plugin's choice. ``device-plugin``: ignore the plan, as NVIDIA's device plugin does; its
best-effort policy picks the free GPUs with the best pairwise links, lowest indices on ties.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from itertools import combinations
from typing import Any, Final, Literal

from gputopo.api.gpus import GpuCountError, pod_gpus
from gputopo.api.group import ANNOTATION_GPUS
from gputopo.api.nodetopology import LinkKind, PodGpus
from gputopo.topology.model import Topology

__all__ = ["AllocationMode", "FakeAllocator", "best_effort", "gpu_request"]

AllocationMode = Literal["plan", "device-plugin"]
_PCIE_SCORE: Final = {LinkKind.PIX: 50, LinkKind.PXB: 40, LinkKind.PHB: 30, LinkKind.NODE: 20, LinkKind.SYS: 10}
_TERMINAL: Final = ("Succeeded", "Failed")


def _pair_score(topology: Topology, a: int, b: int) -> int:
    link = topology.link(a, b)
    if link.usable_nvlink:
        return 100 * max(1, link.nvlinks)
    return _PCIE_SCORE.get(link.kind, 10)


def best_effort(topology: Topology, free: list[int], size: int, must: tuple[int, ...] = ()) -> list[int] | None:
    """The device plugin's best-effort choice of ``size`` GPUs among ``free``; None when too few.

    ``must`` (the kubelet's must-include devices, not in ``free``) count towards the size and the score.
    """
    extra = size - len(must)
    if extra > len(free) or extra < 0:
        return None
    if extra == 0:
        return sorted(must)
    if size == 1:
        return [min(free)]
    best: tuple[int, ...] | None = None
    best_score = -1
    for group in combinations(sorted(free), extra):
        score = sum(_pair_score(topology, a, b) for a, b in combinations((*must, *group), 2))
        if score > best_score:
            best, best_score = group, score
    return sorted((*must, *best)) if best else None


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

    def __init__(self, topology: Topology, mode: AllocationMode = "plan") -> None:
        self.topology = topology
        self.mode = mode
        self._held: dict[tuple[str, str, str], list[int]] = {}  # (namespace, name, uid) -> GPUs
        self._lock = threading.Lock()

    def free(self) -> list[int]:
        used = {g for gpus in self._held.values() for g in gpus}
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
            chosen = best_effort(self.topology, free, size)
            if chosen is not None:
                self._held[key] = chosen

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
