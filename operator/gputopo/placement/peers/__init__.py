"""Peer policies the simulator compares gputopo against, one module per scheduler they model."""

from gputopo.placement.peers.kueue_tas import place_kueue_tas
from gputopo.placement.peers.local_nvlink import place_local_nvlink
from gputopo.placement.peers.slurm_block import place_slurm_block
from gputopo.placement.peers.tier_binpack import place_tier_binpack
from gputopo.placement.peers.topology_blind import place_topology_blind

__all__ = ["place_kueue_tas", "place_local_nvlink", "place_slurm_block", "place_tier_binpack", "place_topology_blind"]
