"""Where a fake node's topology comes from: a file (nvidia-smi text or NodeTopology YAML) or a catalog name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputopo.topology.model import Topology
from gputopo_probe.errors import ProbeError

__all__ = ["load_fake_topology"]


def _load_file(path: Path, gpu_model: str | None) -> Topology:
    import gputopo.topology as topology_package

    loader: Any = getattr(topology_package, "load_topology", None)
    if loader is not None:
        loaded: Topology = loader(path, gpu_model=gpu_model)
        return loaded
    from gputopo.topology.nvidia_smi import parse_nvidia_smi  # before load_topology existed

    return parse_nvidia_smi(path.read_text(), gpu_model=gpu_model)


def _load_catalog(name: str, gpu_model: str | None) -> Topology:
    try:
        from gputopo.topology import catalog  # type: ignore[attr-defined,unused-ignore]
    except ImportError as error:
        raise ProbeError(f"{name!r} is not a file, and the node-type catalog is not available") from error
    topology: Topology = catalog.load_node_type(name)
    return topology.with_gpu_model(gpu_model) if gpu_model else topology


def load_fake_topology(source: str, gpu_model: str | None = None) -> Topology:
    """``source`` is a path, or a catalog node type such as ``hgx-h100``."""
    path = Path(source)
    try:
        return _load_file(path, gpu_model) if path.exists() else _load_catalog(source, gpu_model)
    except ProbeError:
        raise
    except (OSError, ValueError, KeyError) as error:
        raise ProbeError(f"cannot load topology {source!r}: {error}") from error
