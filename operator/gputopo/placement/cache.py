"""The memo a snapshot owns: per-topology subset scores and what is derived per node class.

A snapshot and every snapshot derived from it by ``reserve``/``release``/``with_node`` share one cache:
nothing in it depends on which GPUs are used, only on topologies and free sets named in the keys. Entries
keyed on a topology hold that topology, so its id cannot be reused while the entry lives.
"""

from __future__ import annotations

from gputopo.placement.scores import NodeScores
from gputopo.topology.memo import Memo
from gputopo.topology.model import Topology

__all__ = ["PlacementCache"]


class PlacementCache:
    """Subset scores per topology, and typed tables of node-class results (offers, choices) in ``memo``."""

    __slots__ = ("_scores", "memo")

    def __init__(self) -> None:
        self._scores: dict[int, NodeScores] = {}
        self.memo = Memo()

    def scores(self, topology: Topology) -> NodeScores:
        """The subset scores of a topology object (built once per object)."""
        found = self._scores.get(id(topology))
        if found is None or found.topology is not topology:
            found = self._scores[id(topology)] = NodeScores(topology)
        return found
