"""What a snapshot's network tiers look like: switches per tier and the nodes no tier label places.

A node without a tier's label stands alone at that tier (see ``TierConfig.domains``); this summary lets
``gputopo plan --json`` and a user see which nodes those are, instead of finding out from a placement.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gputopo.placement.types import Snapshot

__all__ = ["TierSummary", "tier_summary"]


@dataclass(frozen=True, slots=True)
class TierSummary:
    """One tier: its label, oversubscription, the switches its labels name and the nodes that lack it."""

    tier: int
    label: str
    oversubscription: float
    switches: int
    largest_switch_nodes: int
    nodes_without_label: tuple[str, ...]

    def to_data(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "label": self.label,
            "oversubscription": self.oversubscription,
            "switches": self.switches,
            "largestSwitchNodes": self.largest_switch_nodes,
            "nodesWithoutLabel": list(self.nodes_without_label),
        }


def tier_summary(snapshot: Snapshot) -> tuple[TierSummary, ...]:
    """Per configured tier, lowest first; each node without the tier's label is alone at that tier."""
    out: list[TierSummary] = []
    for tier, level in enumerate(snapshot.tiers.levels):
        alone = tuple(n.name for n in snapshot if not n.labels.get(level.label))
        switches = Counter(
            domains[tier] for n, domains in zip(snapshot, snapshot.domains, strict=True) if n.labels.get(level.label)
        )
        largest = max(switches.values(), default=0)
        out.append(TierSummary(tier, level.label, level.oversubscription, len(switches), largest, alone))
    return tuple(out)
