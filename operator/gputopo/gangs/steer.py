"""The JSON patch (RFC 6902) that pins a gated pod to its planned node and lifts gputopo's gate.

While a pod has scheduling gates the API server lets its required node affinity only grow (k8s.io/kubernetes
v1.37.2 ``pkg/apis/core/validation/validation.go``, ``ValidatePodUpdate`` → ``validateNodeAffinityMutation``):
with no required affinity, or an empty list of terms, anything may be set; with terms, none may be added or
removed, and each term may only have requirements appended to ``matchExpressions`` or ``matchFields``, except
a term with neither, which must stay empty. Gates may only be removed (``validateOnlyDeletedSchedulingGates``).

So ``metadata.name In [node]`` is appended to the ``matchFields`` of every non-empty term (an empty term
matches no node and stays as it is), or a required affinity of that one term is created. The gate is removed
by index after a ``test`` of that index, so a concurrent change to the gates fails the patch instead of
removing another scheduler's gate.

Where the pod as read has no map or list at a path the patch adds to (no annotations at all, no affinity), the
patch adds it whole, which on a pod changed since would replace what another controller put there: such an add
follows a ``test`` that the path still holds what was read (``null`` for a path that is absent, which the API
server's JSON patch takes as passing only while the path is absent). A pod changed meanwhile fails the patch;
the next pass reads it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputopo.api.group import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_GENERATION
from gputopo.errors import GputopoError
from gputopo.gangs.annotations import ANNOTATION_GANG
from gputopo.gangs.claims import mapping
from gputopo.gangs.model import GATE, GangId

__all__ = ["NotGatedError", "add_whole", "release_patch", "steer_patch"]

Patch = list[dict[str, Any]]
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


class NotGatedError(GputopoError, ValueError):
    """The pod no longer carries gputopo's gate: someone else lifted it, or it was never gated."""


def _pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901): '~' and '/' in a key escaped."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _gate_ops(pod: Mapping[str, Any]) -> Patch:
    gates = mapping(pod.get("spec")).get("schedulingGates")
    for i, gate in enumerate(gates if isinstance(gates, list) else ()):
        if isinstance(gate, Mapping) and gate.get("name") == GATE:
            path = _pointer("spec", "schedulingGates", i)
            return [{"op": "test", "path": path, "value": dict(gate)}, {"op": "remove", "path": path}]
    raise NotGatedError(f"the pod has no scheduling gate {GATE}")


def add_whole(path: str, read: Any, value: Any) -> Patch:
    """Add ``value`` at ``path`` (replacing what is there) only while the path still holds what was ``read``
    (``None``: while it is absent)."""
    return [{"op": "test", "path": path, "value": read}, {"op": "add", "path": path, "value": value}]


def _affinity_ops(pod: Mapping[str, Any], node: str) -> Patch:
    requirement = {"key": "metadata.name", "operator": "In", "values": [node]}
    term = {"matchFields": [requirement]}
    spec = mapping(pod.get("spec"))
    if not isinstance(spec.get("affinity"), Mapping):
        value = {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [term]}}}
        return add_whole("/spec/affinity", spec.get("affinity"), value)
    affinity = mapping(spec["affinity"])
    if not isinstance(affinity.get("nodeAffinity"), Mapping):
        path = _pointer("spec", "affinity", "nodeAffinity")
        return add_whole(path, affinity.get("nodeAffinity"), {_REQUIRED: {"nodeSelectorTerms": [term]}})
    node_affinity = mapping(affinity["nodeAffinity"])
    if not isinstance(node_affinity.get(_REQUIRED), Mapping):
        path = _pointer("spec", "affinity", "nodeAffinity", _REQUIRED)
        return add_whole(path, node_affinity.get(_REQUIRED), {"nodeSelectorTerms": [term]})
    terms = mapping(node_affinity[_REQUIRED]).get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        path = _pointer("spec", "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms")
        return add_whole(path, terms, [term])
    ops: Patch = []
    for i, raw in enumerate(terms):
        existing = mapping(raw)
        fields, expressions = existing.get("matchFields"), existing.get("matchExpressions")
        if not fields and not expressions:
            continue  # matches no node; validation forbids adding to it
        at = ("spec", "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms", i, "matchFields")
        if isinstance(fields, list) and fields:
            ops.append({"op": "add", "path": _pointer(*at, "-"), "value": requirement})
        else:
            ops.append({"op": "add", "path": _pointer(*at), "value": [requirement]})
    return ops


def _annotation_ops(pod: Mapping[str, Any], values: Mapping[str, str]) -> Patch:
    annotations = mapping(pod.get("metadata")).get("annotations")
    if not isinstance(annotations, Mapping):
        return add_whole("/metadata/annotations", annotations, dict(values))
    return [{"op": "add", "path": _pointer("metadata", "annotations", k), "value": v} for k, v in values.items()]


def steer_patch(pod: Mapping[str, Any], node: str, gpus: tuple[int, ...], generation: int, gang: GangId) -> Patch:
    """Pin the gated pod to ``node`` with its planned ``gpus``, and lift gputopo's gate, in one patch.

    Raises ``NotGatedError`` when the pod no longer carries the gate (nothing to steer)."""
    gate = _gate_ops(pod)
    annotations = {
        ANNOTATION_GPUS: ",".join(str(g) for g in gpus),
        ANNOTATION_PLACEMENT_GENERATION: str(generation),
        ANNOTATION_GANG: gang.key[1],
    }
    return [*_affinity_ops(pod, node), *_annotation_ops(pod, annotations), *gate]


def release_patch(pod: Mapping[str, Any], gang: GangId | None = None) -> Patch:
    """Lift gputopo's gate from a rank that needs no GPUs (nothing to place); with ``gang``, the pod is marked as
    its member, so it stays one once ungated. Raises ``NotGatedError`` as above."""
    marks = _annotation_ops(pod, {ANNOTATION_GANG: gang.key[1]}) if gang is not None else []
    return [*marks, *_gate_ops(pod)]
