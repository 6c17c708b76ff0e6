"""Read a topology from a file or text: ``nvidia-smi topo -m`` output or NodeTopology YAML/JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gputopo.api.nodetopology import NodeTopology, NodeTopologyStatus
from gputopo.api.problems import one_line
from gputopo.topology.bandwidth import gpu_spec
from gputopo.topology.convert import from_status
from gputopo.topology.model import Topology, TopologyError
from gputopo.topology.nvidia_smi import parse_nvidia_smi

__all__ = ["load_topology", "read_topology_text", "with_gpu_model"]


def with_gpu_model(topology: Topology, gpu_model: str) -> Topology:
    """The topology with every GPU named ``gpu_model`` (and that model's NVLink version)."""
    spec = gpu_spec(gpu_model)
    version = spec.nvlink.version if spec is not None and spec.nvlink is not None else None
    return topology.with_gpu_model(gpu_model, version)


def _status_of(document: Any) -> NodeTopologyStatus | None:
    """The NodeTopology status in a parsed YAML document (a whole object, or its status), else None."""
    if not isinstance(document, dict):
        return None
    items = document.get("items")
    if isinstance(items, list) and "gpus" not in document:  # `kubectl get ... -o yaml` of a list
        if len(items) != 1:
            raise TopologyError(f"a list of {len(items)} objects: name one NodeTopology")
        document = items[0]
        if not isinstance(document, dict):
            return None
    if isinstance(document.get("status"), dict):
        return NodeTopology.model_validate(document).status
    if "gpus" in document or "links" in document:
        return NodeTopologyStatus.model_validate(document)
    return None


def read_topology_text(
    text: str, *, gpu_model: str | None = None, fmt: str = "auto", c2c: bool | None = None
) -> Topology:
    """A topology from text that is NodeTopology YAML/JSON or ``nvidia-smi topo -m`` output.

    ``fmt`` is ``auto`` (YAML when the text is a NodeTopology document, else nvidia-smi), ``yaml`` or
    ``nvidia-smi``. ``c2c`` says whether a matrix's GPUs reach a Grace CPU over NVLink-C2C (None: inferred).
    """
    if fmt not in ("auto", "yaml", "nvidia-smi"):
        raise TopologyError(f"unknown topology format {fmt!r} (auto, yaml or nvidia-smi)")
    status: NodeTopologyStatus | None = None
    if fmt != "nvidia-smi":
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as error:
            if fmt == "yaml":
                raise TopologyError(f"not YAML: {error}") from None
            document = None
        try:
            status = _status_of(document)
        except ValidationError as error:
            raise TopologyError(f"not a valid NodeTopology: {one_line(error)}") from None
        if status is None and fmt == "yaml":
            raise TopologyError("not a NodeTopology document (no status, gpus or links)")
    if status is None:
        return parse_nvidia_smi(text, gpu_model=gpu_model, c2c=c2c)
    topology = from_status(status)
    if gpu_model:
        topology = with_gpu_model(topology, gpu_model)
    return topology


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


def load_topology(path_or_text: str | Path, *, gpu_model: str | None = None) -> Topology:
    """A topology from a path (``Path``, or a string naming an existing file) or from the text itself.

    The text may be ``nvidia-smi topo -m`` output or NodeTopology YAML (a whole object, or its status).
    ``gpu_model`` names the GPUs (nvidia-smi does not; the NVLink generation sets the bandwidth).
    """
    if isinstance(path_or_text, Path):
        text = path_or_text.read_text()
    elif "\n" not in path_or_text and _is_file(path_or_text):
        text = Path(path_or_text).read_text()
    else:
        text = path_or_text
    return read_topology_text(text, gpu_model=gpu_model)
