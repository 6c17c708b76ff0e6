"""NodeTopology objects into the facts the operator indexes: the pure model of each node.

The conversion is the shared ``gputopo.topology.from_status``; here a status that cannot be a topology
becomes facts without a model (and an error the log shows), so one bad object never stops the loop: the
node simply offers nothing to new plans.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.control.facts import TopologyFacts
from gputopo.topology.convert import from_status
from gputopo.topology.model import TopologyError

__all__ = ["content_digest", "topology_facts"]


def content_digest(status: Mapping[str, Any]) -> bytes:
    """What a NodeTopology says, less when the probe said it, as a 16-byte digest: the facts (and with them
    the model, whose estimates the planner keeps per model object) are rebuilt only when it changes, and no
    copy of the object is kept to compare with."""
    content = {k: v for k, v in status.items() if k not in ("observedAt", "conditions")}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def topology_facts(body: Mapping[str, Any]) -> TopologyFacts:
    meta = body.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
    raw = body.get("status")
    try:
        status = NodeTopologyStatus.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as exc:
        return TopologyFacts(name, None, f"status does not parse: {exc.error_count()} errors")
    try:
        topology = from_status(status) if status.gpus else None
    except (TopologyError, ValueError) as exc:
        return TopologyFacts(name, None, str(exc))
    if topology is not None:
        # An XID without a reason text still says why the GPU failed.
        for gpu in status.gpus:
            if gpu.health.xid and not gpu.health.reason and gpu.index < topology.gpu_count:
                topology = topology.with_gpu_health(gpu.index, gpu.health.state, f"XID {gpu.health.xid}")
    return TopologyFacts(name, topology)
