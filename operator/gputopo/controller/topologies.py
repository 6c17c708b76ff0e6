"""NodeTopology objects into the facts the operator indexes: the pure model plus the pods' real GPUs.

The conversion is the shared ``gputopo.topology.from_status``; here a status that cannot be a topology
becomes facts without a model (and an error the log shows), so one bad object never stops the loop: the
node simply offers nothing to new plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.controller.facts import TopologyFacts
from gputopo.topology.convert import from_status
from gputopo.topology.model import TopologyError

__all__ = ["topology_facts"]


def topology_facts(body: Mapping[str, Any]) -> TopologyFacts:
    meta = body.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
    raw = body.get("status")
    try:
        status = NodeTopologyStatus.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as exc:
        return TopologyFacts(name, None, (), f"status does not parse: {exc.error_count()} errors")
    try:
        topology = from_status(status) if status.gpus else None
    except (TopologyError, ValueError) as exc:
        return TopologyFacts(name, None, tuple(status.pods), str(exc), status.observed_at)
    if topology is not None:
        # An XID without a reason text still says why the GPU failed.
        for gpu in status.gpus:
            if gpu.health.xid and not gpu.health.reason and gpu.index < topology.gpu_count:
                topology = topology.with_gpu_health(gpu.index, gpu.health.state, f"XID {gpu.health.xid}")
    return TopologyFacts(name, topology, tuple(status.pods), observed_at=status.observed_at)
