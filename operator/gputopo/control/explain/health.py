"""The parts of a node that are not healthy, in a person's words: NVLinks down or degraded, NICs down, GPUs
unhealthy, the node itself not ready or cordoned."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from gputopo.api.nodetopology import LinkState, NicState
from gputopo.placement.types import NodeInfo

__all__ = ["Fault", "node_faults"]


@dataclass(frozen=True, slots=True)
class Fault:
    node: str
    part: str  # "link 0-1", "nic mlx5_0", "gpu 3", "node"
    state: str  # Down, Degraded, Unhealthy, NotReady, Cordoned

    def words(self) -> str:
        return f"{self.node} {self.part} {self.state}"

    def to_data(self) -> dict[str, Any]:
        return {"node": self.node, "part": self.part, "state": self.state}


def node_faults(node: NodeInfo, gpus: Collection[int] | None = None, nics: Iterable[str] | None = None) -> list[Fault]:
    """What is unhealthy on ``node``; with ``gpus`` (and ``nics``) only the parts a gang on them uses."""
    out: list[Fault] = []
    if not node.ready:
        out.append(Fault(node.name, "node", "NotReady"))
    if not node.schedulable and gpus is None:
        out.append(Fault(node.name, "node", "Cordoned"))
    topology = node.topology
    for gpu in topology.gpus:
        if not gpu.healthy and (gpus is None or gpu.index in gpus):
            out.append(Fault(node.name, f"gpu {gpu.index}", "Unhealthy"))
    for (a, b), link in sorted(topology.links.items()):
        if link.is_nvlink and link.state is not LinkState.UP and (gpus is None or (a in gpus and b in gpus)):
            out.append(Fault(node.name, f"link {a}-{b}", str(link.state.value)))
    wanted = set(nics) if nics is not None else None
    for nic in topology.nics:
        if nic.state is not NicState.UP and (wanted is None or nic.name in wanted):
            out.append(Fault(node.name, f"nic {nic.name}", str(nic.state.value)))
    return out
