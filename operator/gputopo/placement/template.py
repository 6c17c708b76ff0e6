"""The scheduling constraints of a gang's pod template, read strictly: a field of the wrong shape is an error
that names it (``template.spec.tolerations[0]: expected an object, got a string``), never a crash.

The template is free-form in the CRD (``x-kubernetes-preserve-unknown-fields``), so the API server accepts
``nodeSelector: [a]`` or ``affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "yes"}}``;
the operator marks such a job Invalid with this message and ``gputopo plan`` refuses it with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputopo.api.clusterfile import TaintEffect
from gputopo.errors import GputopoError
from gputopo.placement.constraints import NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm, Toleration

__all__ = ["PodConstraints", "TemplateError", "pod_constraints", "template_problem"]


class TemplateError(GputopoError, ValueError):
    """A pod template field of the wrong shape; the message starts with the field's path."""


@dataclass(frozen=True, slots=True)
class PodConstraints:
    node_selector: Mapping[str, str]
    affinity_terms: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TemplateError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise TemplateError(f"{where}: expected a list, got {_kind(value)}")
    return list(value)


def _text(value: object, where: str, *, default: str = "") -> str:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TemplateError(f"{where}: expected a string, got {_kind(value)}")
    return str(value)


def _choice(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise TemplateError(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _requirement(raw: object, where: str) -> NodeSelectorRequirement:
    entry = _object(raw, where)
    key = _text(entry.get("key"), f"{where}.key")
    if not key:
        raise TemplateError(f"{where}.key: required")
    ops = tuple(op.value for op in NodeSelectorOperator)
    operator = _choice(_text(entry.get("operator"), f"{where}.operator"), ops, f"{where}.operator")
    values = tuple(
        _text(v, f"{where}.values[{i}]") for i, v in enumerate(_list(entry.get("values"), f"{where}.values"))
    )
    return NodeSelectorRequirement(key, NodeSelectorOperator(operator), values)


def _terms(affinity: Mapping[str, Any], where: str) -> tuple[NodeSelectorTerm, ...]:
    node = _object(affinity.get("nodeAffinity"), f"{where}.nodeAffinity")
    where = f"{where}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _object(node.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms = []
    for i, raw in enumerate(_list(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")):
        at = f"{where}.nodeSelectorTerms[{i}]"
        term = _object(raw, at)
        expressions = _list(term.get("matchExpressions"), f"{at}.matchExpressions")
        terms.append(tuple(_requirement(e, f"{at}.matchExpressions[{j}]") for j, e in enumerate(expressions)))
    return tuple(terms)


def _toleration(raw: object, where: str) -> Toleration:
    entry = _object(raw, where)
    operator = _choice(_text(entry.get("operator"), f"{where}.operator", default="Equal") or "Equal",
                       ("Equal", "Exists"), f"{where}.operator")  # fmt: skip
    effect = _text(entry.get("effect"), f"{where}.effect")
    if effect:
        _choice(effect, tuple(e.value for e in TaintEffect), f"{where}.effect")
    return Toleration(
        key=_text(entry.get("key"), f"{where}.key"),
        operator=operator,
        value=_text(entry.get("value"), f"{where}.value"),
        effect=TaintEffect(effect) if effect else None,
    )


def pod_constraints(template: Mapping[str, Any], root: str = "template") -> PodConstraints:
    """Node selector, required node affinity and tolerations of a pod template (``spec.template``)."""
    pod = _object(_object(template, root).get("spec"), f"{root}.spec")
    where = f"{root}.spec"
    selector = _object(pod.get("nodeSelector"), f"{where}.nodeSelector")
    return PodConstraints(
        node_selector={str(k): _text(v, f"{where}.nodeSelector.{k}") for k, v in selector.items()},
        affinity_terms=_terms(_object(pod.get("affinity"), f"{where}.affinity"), f"{where}.affinity"),
        tolerations=tuple(
            _toleration(t, f"{where}.tolerations[{i}]")
            for i, t in enumerate(_list(pod.get("tolerations"), f"{where}.tolerations"))
        ),
    )


def _containers(pod: Mapping[str, Any], where: str) -> None:
    for i, raw in enumerate(_list(pod.get("containers"), f"{where}.containers")):
        at = f"{where}.containers[{i}]"
        container = _object(raw, at)
        resources = _object(container.get("resources"), f"{at}.resources")
        for part in ("limits", "requests"):
            _object(resources.get(part), f"{at}.resources.{part}")
        for j, raw_port in enumerate(_list(container.get("ports"), f"{at}.ports")):
            port = _object(raw_port, f"{at}.ports[{j}]")
            number = port.get("containerPort")
            if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
                raise TemplateError(f"{at}.ports[{j}].containerPort: expected a port number, got {number!r}")


def template_problem(template: Mapping[str, Any], root: str = "template") -> str | None:
    """The first field of the template whose shape gputopo cannot read, in words; None when all can be read."""
    try:
        pod_constraints(template, root)
        _containers(_object(_object(template, root).get("spec"), f"{root}.spec"), f"{root}.spec")
    except TemplateError as error:
        return str(error)
    return None
