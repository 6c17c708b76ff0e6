"""The placement policies by name, as the simulator and ``gputopo simulate --policy`` know them."""

from __future__ import annotations

from gputopo.placement.engine import place
from gputopo.placement.types import Policy
from gputopo.sim.peers import (
    place_kueue_tas,
    place_local_nvlink,
    place_slurm_block,
    place_tier_binpack,
    place_topology_blind,
)

__all__ = ["POLICIES"]


POLICIES: dict[str, Policy] = {
    "gputopo": place,
    "topology-blind": place_topology_blind,
    "tier-binpack": place_tier_binpack,
    "local-nvlink": place_local_nvlink,
    "kueue-tas": place_kueue_tas,
    "slurm-block": place_slurm_block,
}
