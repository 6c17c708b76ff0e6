"""Peer policies the simulator compares gputopo against, one module per scheduler they model."""

from gputopo.sim.peers.kueue_tas import place_kueue_tas
from gputopo.sim.peers.local_nvlink import place_local_nvlink
from gputopo.sim.peers.slurm_block import place_slurm_block
from gputopo.sim.peers.tier_binpack import place_tier_binpack
from gputopo.sim.peers.topology_blind import place_topology_blind

__all__ = ["place_kueue_tas", "place_local_nvlink", "place_slurm_block", "place_tier_binpack", "place_topology_blind"]
