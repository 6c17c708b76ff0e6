"""NodeTopology objects into the facts the operator indexes: the pure model plus the pods' real GPUs.

The conversion is the shared ``gputopo.topology.from_status``; here a status that cannot be a topology
becomes facts without a model (and an error the log shows), so one bad object never stops the loop: the
node simply offers nothing to new plans.

A probe publishes its node's whole status each time the pods on it change, while the hardware stays the same.
Such a publication keeps the model it had (``with_pods``): the planner's estimates are kept per model object,
so a new but equal model would be estimated all over again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gputopo.api.nodetopology import NodeTopologyStatus, PodGpus
from gputopo.control.facts import TopologyFacts, parse_time
from gputopo.topology.convert import from_status
from gputopo.topology.model import TopologyError

__all__ = ["Digests", "carry_pod_since", "content_digests", "topology_facts", "with_pods"]

Digests = tuple[bytes, bytes]
"""(the hardware, the pods) of a NodeTopology status, 16 bytes each."""

_PODS: TypeAdapter[list[PodGpus]] = TypeAdapter(list[PodGpus])


def _digest(content: object) -> bytes:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def content_digests(status: Mapping[str, Any]) -> Digests:
    """What a NodeTopology says, less what the probe re-publishes each interval, as two digests: its
    hardware and its pods. The facts are rebuilt only when one changes (the model only when the hardware
    does), and no copy of the object is kept to compare with."""
    hardware = {k: v for k, v in status.items() if k not in ("observedAt", "conditions", "pods")}
    return _digest(hardware), _digest(status.get("pods"))


def with_pods(facts: TopologyFacts, status: Mapping[str, Any]) -> TopologyFacts | None:
    """``facts`` with the pods and publication time of ``status``, whose hardware is the one ``facts`` was
    built from: the model object is kept. None when the pods do not parse (build the facts anew then)."""
    try:
        pods = tuple(_PODS.validate_python(status.get("pods") or []))
    except ValidationError:
        return None
    return replace(facts, pods=pods, observed_at=parse_time(status.get("observedAt")))


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


def carry_pod_since(previous: TopologyFacts | None, new: TopologyFacts, now: datetime) -> TopologyFacts:
    """Stamp each pod entry with when its GPU list first appeared: an entry unchanged since before a pod
    of that name was bound is about an earlier pod (names repeat across a job's generations)."""
    before = {(p.namespace, p.name): tuple(p.gpus) for p in previous.pods} if previous else {}
    stamp = new.observed_at or now
    since = {}
    for entry in new.pods:
        key = (entry.namespace, entry.name)
        kept = previous.pod_since.get(key) if previous is not None and before.get(key) == tuple(entry.gpus) else None
        since[key] = kept or stamp
    return replace(new, pod_since=since)
