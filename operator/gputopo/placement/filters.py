"""Which nodes may run a gang's workers at all, and why the others may not (for refusals)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.placement.constraints import matches_terms, tolerates_all
from gputopo.placement.types import NodeInfo, Request

__all__ = ["FilterResult", "filter_nodes", "node_rejection"]


def node_rejection(node: NodeInfo, request: Request) -> str | None:
    """Why the node cannot take any worker of the request, or None when it passes the filters."""
    if not node.ready:
        return "not ready"
    if not node.schedulable:
        return "cordoned"
    if not tolerates_all(request.tolerations, node.taints):
        return "untolerated taint"
    if any(node.labels.get(k) != v for k, v in request.node_selector.items()):
        return "node selector"
    if not matches_terms(request.affinity_terms, node.labels):
        return "node affinity"
    if request.gpu_model and request.gpu_model.lower() not in node.gpu_model.lower():
        return f"GPU model is not {request.gpu_model}"
    return None


@dataclass(slots=True)
class FilterResult:
    passed: list[int] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)

    def describe(self) -> tuple[str, ...]:
        return tuple(f"{count} {reason}" for reason, count in self.rejected.most_common())


def filter_nodes(nodes: Iterable[NodeInfo], request: Request) -> FilterResult:
    result = FilterResult()
    # Most nodes are untainted and most gangs select nothing: check those cheaply.
    plain = not (request.node_selector or request.affinity_terms or request.gpu_model)
    for i, node in enumerate(nodes):
        # used_gpus may name GPUs the topology lacks (a stale report): only the free set decides.
        if len(node.used_gpus) >= node.topology.gpu_count and not node.free_gpus:
            result.rejected["no free GPU"] += 1
            continue
        if plain and node.ready and node.schedulable and not node.taints:
            result.passed.append(i)
            continue
        why = node_rejection(node, request)
        if why is None:
            result.passed.append(i)
        else:
            result.rejected[why] += 1
    return result
