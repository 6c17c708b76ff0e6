"""The memo a snapshot owns: per-topology subset scores and what is derived per node class.

A snapshot and every snapshot derived from it by ``reserve``/``release``/``with_node`` share one cache:
nothing in it depends on which GPUs are used, only on topologies and free sets named in the keys. The cache
keeps every topology of the snapshots made with it, so no id in a key can be reused while the cache lives.

The operator hands one cache to the snapshots of successive control passes: a node whose model and used GPUs
did not change since the last pass is not worked out again. It starts a new one once this one holds
``size()`` past its bound.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputopo.placement.scores import NodeScores
from gputopo.topology.memo import Memo
from gputopo.topology.model import Topology

__all__ = ["PlacementCache"]


class PlacementCache:
    """Subset scores per topology, and typed tables of node-class results (offers, choices) in ``memo``."""

    __slots__ = ("_kept", "_scores", "memo", "warmed")

    def __init__(self) -> None:
        self._scores: dict[int, NodeScores] = {}
        self._kept: dict[int, Topology] = {}
        self.memo = Memo()
        self.warmed: set[tuple[int, int]] = set()  # job shapes decided ahead (gputopo.control.warmup)

    def keep(self, topologies: Iterable[Topology]) -> None:
        """Hold these topologies for as long as the cache lives: keys name them by id."""
        for topology in topologies:
            self._kept.setdefault(id(topology), topology)

    def size(self) -> int:
        """Entries held: topologies, their scores, and every table's rows."""
        return len(self._kept) + len(self._scores) + self.memo.size()

    def scores(self, topology: Topology) -> NodeScores:
        """The subset scores of a topology object (built once per object)."""
        found = self._scores.get(id(topology))
        if found is None or found.topology is not topology:
            found = self._scores[id(topology)] = NodeScores(topology)
        return found
