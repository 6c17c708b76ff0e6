"""One pod watch for every fake node of a process, feeding each node's ``FakeAllocator``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gputopo_probe.errors import ApiError
from gputopo_probe.fake.allocation import FakeAllocator
from gputopo_probe.publish.backoff import Backoff
from gputopo_probe.publish.kube import Kube

__all__ = ["PodWatch"]

log = logging.getLogger(__name__)


class PodWatch:
    def __init__(self, kube: Kube, allocators: Mapping[str, FakeAllocator], *, node: str | None = None) -> None:
        self.kube = kube
        self.allocators = allocators
        self.selector = f"spec.nodeName={node}" if node else "spec.nodeName!="
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-pod-watch", daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _resync(self) -> str:
        pods, version = self.kube.list_pods(self.selector)
        by_node: dict[str, list[Mapping[str, Any]]] = {name: [] for name in self.allocators}
        for pod in pods:
            node = str((pod.get("spec") or {}).get("nodeName", ""))
            if node in by_node:
                by_node[node].append(pod)
        for node, allocator in self.allocators.items():
            allocator.resync(by_node[node])
        return version

    def _run(self) -> None:
        backoff = Backoff(max_s=10.0)
        while not self._stop.is_set():
            try:
                # List, then watch from the list's version: nothing deleted between two watches is missed.
                version = self._resync()
                for event, pod in self.kube.watch_gpu_pods(self.selector, timeout_s=60, resource_version=version):
                    node = (pod.get("spec") or {}).get("nodeName")
                    allocator = self.allocators.get(str(node)) if node else None
                    if allocator is not None:
                        allocator.observe(event, pod)
                    if self._stop.is_set():
                        return
                backoff.succeeded()
                self._stop.wait(1.0)  # a watch the server ends at once must not become a busy loop
            except ApiError as error:
                delay = backoff.failed(time.monotonic())
                log.warning("pod watch: %s; retrying in %.1fs", error, delay)
                self._stop.wait(delay)
