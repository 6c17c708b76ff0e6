"""Kueue Topology Aware Scheduling on NVL72 racks, configured as its GB200 guidance has it: the NVLink clique
(``nvidia.com/gpu.clique``) as the lowest topology level below the network tiers, the gang's
``kueue.x-k8s.io/podset-preferred-topology`` at the clique, and, when the job names a slice size,
``podset-slice-required-topology`` at the clique with ``podset-slice-size`` ranks per slice. BestFit, as
``tier_binpack``: the lowest level whose domain holds the gang, the fullest domain that fits; children largest
first, the last best fit. No per-clique cap and no balancing of slices: the gang goes where the greedy walk
puts it.
"""

from __future__ import annotations

from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable
from gputopo.sim.peers.hierarchy import hierarchical_best_fit
from gputopo.sim.peers.tier_binpack import tier_keys

__all__ = ["place_kueue_tas"]


def place_kueue_tas(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    unknown = snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier)
    if unknown:
        return Unplaceable(unknown[0], unknown[1:])
    nvlink, names = snapshot.nvlink_domains, [n.name for n in snapshot]

    def clique(i: int) -> str:
        return nvlink[i] or f"node/{names[i]}"

    keys = [clique, *tier_keys(snapshot, request.required_tier)]
    return hierarchical_best_fit(snapshot, request, keys, unit=request.slice_size or 1, who="Kueue TAS")
