"""Refusals in words a user can act on: what the gang needs and the closest the cluster comes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.groups import Candidate
from gputopo.placement.types import Request, Snapshot, Unplaceable, plural

__all__ = ["intra_words", "refusal"]


def intra_words(intra: IntraNode) -> str:
    return {IntraNode.NVSWITCH: " NVSwitch", IntraNode.NVLINK: " NVLink-connected"}.get(intra, "")


def _largest_domain(snapshot: Snapshot, cands: Sequence[Candidate], tier: int) -> tuple[int, str]:
    slots: dict[str, int] = defaultdict(int)
    for cand in cands:
        slots[snapshot.domains[cand.node][tier]] += cand.offer.capacity
    if not slots:
        return 0, ""
    name = max(slots, key=lambda d: (slots[d], d))
    return slots[name], name


def refusal(
    snapshot: Snapshot, request: Request, sets: Sequence[Sequence[Candidate]], details: tuple[str, ...]
) -> Unplaceable:
    k, workers = request.gpus_per_worker, request.workers
    words = intra_words(request.intra_node)
    per_node = max((c.offer.capacity for cands in sets for c in cands), default=1) <= 1
    gpus = plural(k, f"free{words} GPU")
    need = f"{plural(workers, 'node')} with {gpus}" if per_node else f"{plural(workers, 'group')} of {gpus}"
    if not any(sets):
        return Unplaceable(f"needs {need}; no node has them", details)
    uniform = []
    if request.same_model and len(sets) > 1:
        uniform.append("one GPU model")
    if request.same_driver and len(sets) > 1:
        uniform.append("one driver version")
    of_one = f" of {' and '.join(uniform)}" if uniform else ""
    if request.required_tier is not None and request.required_tier < len(snapshot.tiers):
        tier = request.required_tier
        best, name = max((_largest_domain(snapshot, cands, tier) for cands in sets), default=(0, ""))
        return Unplaceable(
            f"needs {need}{of_one} under one tier-{tier} switch; the largest such domain has {best} ({name})",
            details,
        )
    totals = [(sum(c.offer.capacity for c in cands), cands) for cands in sets]
    best, cands = max(totals, key=lambda t: t[0])
    where = snapshot.nodes[cands[0].node].gpu_model if uniform and cands else ""
    tail = f" ({where})" if where else ""
    return Unplaceable(f"needs {need}{of_one}; the cluster has {best}{tail}", details)
