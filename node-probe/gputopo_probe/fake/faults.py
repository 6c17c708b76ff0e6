"""Faults for fake nodes: one small JSON file per node in a fault directory, written atomically.

The CLI (``gputopo sandbox fault``) writes them; the fake NVML and fake sysfs read them on every poll, so a
fault travels the real discovery and hysteresis path. Faults never touch NodeTopology directly.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gputopo.topology.model import pair
from gputopo_probe.errors import FaultStoreError

__all__ = ["FabricFault", "FaultStore", "GpuFault", "LinkFault", "NicFault", "NodeFaults"]

LinkFault = Literal["down", "degraded", "up"]
NicFault = Literal["down", "up"]
FabricFault = Literal["down", "degraded", "up"]


@dataclass(frozen=True, slots=True)
class GpuFault:
    xid: int | None = None
    hot: bool = False
    seq: int = 0
    """Bumped by every XID written, so the fake raises one XID event per injection."""


@dataclass(frozen=True)
class NodeFaults:
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    nics: dict[str, str] = field(default_factory=dict)
    gpus: dict[int, GpuFault] = field(default_factory=dict)
    fabric: str = ""
    """The node's NVLink fabric: "" healthy, "degraded" (less bandwidth, e.g. a switch tray lost), "down"."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeFaults:
        links: dict[tuple[int, int], str] = {}
        for key, state in dict(data.get("links", {})).items():
            a, _, b = str(key).partition("-")
            links[pair(int(a), int(b))] = str(state)
        gpus = {
            int(k): GpuFault(v.get("xid"), bool(v.get("hot", False)), int(v.get("seq", 0)))
            for k, v in dict(data.get("gpus", {})).items()
        }
        nics = {str(k): str(v) for k, v in dict(data.get("nics", {})).items()}
        return cls(links, nics, gpus, str(data.get("fabric", "")))

    def to_json(self) -> dict[str, Any]:
        return {
            "links": {f"{a}-{b}": s for (a, b), s in sorted(self.links.items())},
            "nics": dict(sorted(self.nics.items())),
            "gpus": {str(i): {"xid": g.xid, "hot": g.hot, "seq": g.seq} for i, g in sorted(self.gpus.items())},
            "fabric": self.fabric,
        }

    @property
    def empty(self) -> bool:
        return not (self.links or self.nics or self.gpus or self.fabric)


_NONE = NodeFaults()


class FaultStore:
    def __init__(self, fault_dir: str | Path) -> None:
        self.fault_dir = Path(fault_dir)
        self._cache: dict[str, tuple[int, NodeFaults]] = {}

    def path(self, node: str) -> Path:
        return self.fault_dir / f"{node}.json"

    # -- reading (every poll: a stat, and a parse only when the file changed) ------------------------------

    def read(self, node: str) -> NodeFaults:
        path = self.path(node)
        try:
            stamp = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            self._cache.pop(node, None)
            return _NONE
        except OSError as error:
            raise FaultStoreError(f"cannot stat {path}: {error}") from error
        cached = self._cache.get(node)
        if cached and cached[0] == stamp:
            return cached[1]
        try:
            faults = NodeFaults.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError) as error:
            raise FaultStoreError(f"bad fault file {path}: {error}") from error
        self._cache[node] = (stamp, faults)
        return faults

    def xid_gpus(self, node: str) -> frozenset[int]:
        """The node's GPUs with an XID: those a device plugin reports Unhealthy; none while the file is unreadable."""
        try:
            faults = self.read(node)
        except FaultStoreError:
            return frozenset()
        return frozenset(i for i, g in faults.gpus.items() if g.xid is not None)

    # -- writing -------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, node: str) -> Iterator[NodeFaults]:
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        with open(self.fault_dir / f".{node}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.path(node)
            try:
                data = json.loads(path.read_text()) if path.exists() else {}
            except ValueError:
                data = {}
            yield NodeFaults.from_json(data)

    def _write(self, node: str, faults: NodeFaults) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.fault_dir, prefix=f".{node}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(faults.to_json(), f)
            os.replace(tmp, self.path(node))
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise FaultStoreError(f"cannot write faults of {node}: {error}") from error

    def link(self, node: str, a: int, b: int, state: LinkFault) -> None:
        if state not in ("down", "degraded", "up"):
            raise FaultStoreError(f"link state must be down, degraded or up, not {state!r}")
        with self._locked(node) as faults:
            links = dict(faults.links)
            if state == "up":
                links.pop(pair(a, b), None)
            else:
                links[pair(a, b)] = state
            self._write(node, NodeFaults(links, faults.nics, faults.gpus, faults.fabric))

    def nic(self, node: str, nic_name: str, state: NicFault) -> None:
        if state not in ("down", "up"):
            raise FaultStoreError(f"NIC state must be down or up, not {state!r}")
        with self._locked(node) as faults:
            nics = dict(faults.nics)
            if state == "up":
                nics.pop(nic_name, None)
            else:
                nics[nic_name] = state
            self._write(node, NodeFaults(faults.links, nics, faults.gpus, faults.fabric))

    def gpu(self, node: str, index: int, *, xid: int | None = None, hot: bool = False, clear: bool = False) -> None:
        """Set GPU ``index``'s fault to exactly this XID and heat; ``clear`` removes it."""
        with self._locked(node) as faults:
            gpus = dict(faults.gpus)
            old = gpus.pop(index, GpuFault())
            if not clear and (xid is not None or hot):
                gpus[index] = GpuFault(xid, hot, old.seq + (1 if xid is not None else 0))
            self._write(node, NodeFaults(faults.links, faults.nics, gpus, faults.fabric))

    def fabric(self, node: str, state: FabricFault) -> None:
        """Every GPU of the node reads its NVLink fabric ``degraded`` or ``down``; ``up`` heals it."""
        if state not in ("down", "degraded", "up"):
            raise FaultStoreError(f"fabric state must be down, degraded or up, not {state!r}")
        with self._locked(node) as faults:
            self._write(node, NodeFaults(faults.links, faults.nics, faults.gpus, "" if state == "up" else state))

    def clear(self, node: str) -> None:
        with self._locked(node):
            self._write(node, NodeFaults())
