"""Where a fake node's topology comes from: a file (nvidia-smi text or NodeTopology YAML) or a catalog name."""

from __future__ import annotations

from pathlib import Path

from gputopo.topology.model import Topology
from gputopo_probe.errors import ProbeError

__all__ = ["load_fake_topology"]


def load_fake_topology(source: str, gpu_model: str | None = None) -> Topology:
    """``source`` is a path, or a catalog node type such as ``hgx-h100``."""
    try:
        from gputopo.topology import load_topology  # type: ignore[attr-defined,unused-ignore]
        from gputopo.topology.catalog import load_node_type  # type: ignore[import-not-found,unused-ignore]
    except ImportError as error:
        raise ProbeError(f"the topology importer is not available: {error}") from error
    path = Path(source)
    try:
        if path.exists():
            topology: Topology = load_topology(path, gpu_model=gpu_model)
        else:
            topology = load_node_type(source)
            if gpu_model:
                topology = topology.with_gpu_model(gpu_model)
    except (OSError, ValueError, KeyError) as error:
        raise ProbeError(f"cannot load topology {source!r}: {error}") from error
    return topology
