"""Kubernetes scheduling constraints a gang's pods carry: taints and tolerations, node affinity terms.

Semantics follow kube-scheduler (``k8s.io/component-helpers/scheduling/corev1``): a toleration with an
empty key and ``Exists`` tolerates every taint; requirements in a term are ANDed, terms are ORed; an
empty term matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gputopo.api.clusterfile import TaintEffect

__all__ = [
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Taint",
    "TaintEffect",
    "Toleration",
    "matches_terms",
    "tolerates_all",
]


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @property
    def blocks_scheduling(self) -> bool:
        """PreferNoSchedule is a hint; only NoSchedule and NoExecute keep an untolerating pod off."""
        return self.effect is not TaintEffect.PREFER_NO_SCHEDULE

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(str(raw["key"]), str(raw.get("value") or ""), TaintEffect(raw.get("effect", "NoSchedule")))


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def tolerates_all(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    """Whether every scheduling-blocking taint is tolerated by some toleration."""
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints if taint.blocks_scheduling)


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: NodeSelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op is NodeSelectorOperator.IN:
            return value is not None and value in self.values
        if op is NodeSelectorOperator.NOT_IN:
            return value is None or value not in self.values
        if op is NodeSelectorOperator.EXISTS:
            return value is not None
        if op is NodeSelectorOperator.DOES_NOT_EXIST:
            return value is None
        # Gt/Lt compare integers; a label that is not an integer does not match.
        if value is None or len(self.values) != 1:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op is NodeSelectorOperator.GT else have < want


NodeSelectorTerm = tuple[NodeSelectorRequirement, ...]


def matches_terms(terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str]) -> bool:
    """Required node affinity: no terms match every node; otherwise some non-empty term must match."""
    if not terms:
        return True
    return any(term and all(r.matches(labels) for r in term) for term in terms)
