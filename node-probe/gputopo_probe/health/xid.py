"""XID critical events: an NVML event set, read by a thread (a node) or drained inline (a probe farm)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import pynvml

from gputopo_probe.errors import GpuLostError, NvmlError
from gputopo_probe.nvml import Nvml

__all__ = ["FATAL_XIDS", "XidEvent", "XidWatcher", "xid_is_fatal"]

log = logging.getLogger(__name__)

# XIDs after which the GPU is unusable until reset or reboot (NVIDIA Xid catalog, RESET_GPU / RESTART_BM).
FATAL_XIDS: Final = frozenset({46, 48, 62, 64, 74, 79, 95, 109, 119, 120, 136, 140, 149, 150, 155})

XidEvent = tuple[int, int]  # (GPU index, XID)


def xid_is_fatal(xid: int) -> bool:
    return xid in FATAL_XIDS


class XidWatcher:
    """Registers every GPU for XidCriticalError; ``drain()`` returns the events seen since the last call."""

    def __init__(self, nvml: Nvml, handles: list[Any]) -> None:
        self.nvml = nvml
        self._index = {id(h): i for i, h in enumerate(handles)}
        self._pending: deque[XidEvent] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: set[int] = set()
        self.event_set: Any = None
        try:
            self.event_set = nvml.call("nvmlEventSetCreate")
        except NvmlError as error:
            log.warning("XID events unavailable: %s", error)
            return
        for h in handles:
            try:
                nvml.call("nvmlDeviceRegisterEvents", h, pynvml.nvmlEventTypeXidCriticalError, self.event_set)
            except NvmlError as error:  # NOT_SUPPORTED leaves the set usable for the others
                log.info("GPU %s: no XID events: %s", self._index[id(h)], error)

    def _wait(self, timeout_ms: int) -> bool:
        """Wait for one event; False when the wait timed out."""
        try:
            data = self.nvml.call("nvmlEventSetWait", self.event_set, timeout_ms)
        except GpuLostError:
            self.lost.update(self._index.values())
            return False
        except NvmlError as error:
            if error.code != pynvml.NVML_ERROR_TIMEOUT:
                log.warning("XID wait failed: %s", error)
            return False
        gpu = self._index.get(id(data.device))
        if gpu is not None and data.eventType == pynvml.nvmlEventTypeXidCriticalError:
            self._pending.append((gpu, int(data.eventData)))
        return True

    def drain(self) -> list[XidEvent]:
        """Events so far; without a thread, reads the event set without waiting."""
        if self.event_set is not None and self._thread is None:
            while self._wait(0):
                pass
        out = []
        while self._pending:
            out.append(self._pending.popleft())
        return out

    def start(self, timeout_ms: int = 1000, on_event: Callable[[], None] | None = None) -> None:
        if self.event_set is None or self._thread is not None:
            return

        def run() -> None:
            while not self._stop.is_set():
                if self._wait(timeout_ms) and on_event:
                    on_event()

        self._thread = threading.Thread(target=run, name="xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.event_set is not None:
            with contextlib.suppress(NvmlError):
                self.nvml.call("nvmlEventSetFree", self.event_set)
            self.event_set = None
