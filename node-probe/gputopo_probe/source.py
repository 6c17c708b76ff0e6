"""Where a fake node's topology comes from: a file (nvidia-smi text or NodeTopology YAML), a Grace node type of
the fakes (``gputopo_probe.fake.grace``) or a catalog name."""

from __future__ import annotations

from pathlib import Path

from gputopo.topology import load_node_type, load_topology, with_gpu_model
from gputopo.topology.model import Topology
from gputopo_probe.errors import ProbeError

__all__ = ["load_fake_topology"]


def load_fake_topology(source: str, gpu_model: str | None = None) -> Topology:
    """``source`` is a path, a Grace node type (``gh200``, ``gb200``, ``gb300``) or a catalog node type such as
    ``hgx-h100``."""
    from gputopo_probe.fake.grace import GRACE_NODE_TYPES, load_grace_node_type

    path = Path(source)
    try:
        if path.exists():
            return load_topology(path, gpu_model=gpu_model)
        topology = load_grace_node_type(source) if source in GRACE_NODE_TYPES else load_node_type(source)
        return with_gpu_model(topology, gpu_model) if gpu_model else topology
    except (OSError, ValueError, KeyError) as error:
        raise ProbeError(f"cannot load topology {source!r}: {error}") from error
