"""NodePodGpus objects into the facts the operator indexes: which GPUs each pod on a node really holds.

An object that does not parse says nothing: its node's pods count by their plans and GPU requests, as before
the probe first reported them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from gputopo.api.nodepodgpus import NodePodGpusStatus
from gputopo.control.facts import PodGpusFacts

__all__ = ["carry_pod_since", "pod_gpus_facts"]


def pod_gpus_facts(name: str, body: Mapping[str, Any], before: PodGpusFacts | None, now: datetime) -> PodGpusFacts:
    """The facts of one NodePodGpus; ``before``, the facts of its previous publication, keeps each unchanged
    entry's first-published time."""
    raw = body.get("status")
    try:
        status = NodePodGpusStatus.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError:
        return PodGpusFacts(name)
    facts = PodGpusFacts(name, tuple(status.pods), seen_at=status.observed_at)
    return carry_pod_since(before, facts, status.observed_at or now)


def carry_pod_since(previous: PodGpusFacts | None, new: PodGpusFacts, stamp: datetime) -> PodGpusFacts:
    """Stamp each pod entry with when its GPU list first appeared (``stamp``: this publication, unless it was
    in the previous one): an entry unchanged since before a pod of that name was bound is about an earlier pod
    (names repeat across a job's generations)."""
    before = {(p.namespace, p.name): tuple(p.gpus) for p in previous.pods} if previous else {}
    since = {}
    for entry in new.pods:
        key = (entry.namespace, entry.name)
        kept = previous.pod_since.get(key) if previous is not None and before.get(key) == tuple(entry.gpus) else None
        since[key] = kept or stamp
    return PodGpusFacts(new.name, new.pods, since, new.seen_at)
