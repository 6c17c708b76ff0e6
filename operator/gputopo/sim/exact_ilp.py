"""The reference as a mixed-integer program, for instances too large to walk exhaustively.

Without multi-node NVLink domains a multi-node gang's figure (``estimate_gang``) is the minimum over its nodes
of ``min(intra, inter / oversubscription)`` of each node's subset, at the oversubscription of the tier it
spans. So per switch domain D of tier t (the whole cluster above the top tier), with f the tier's
oversubscription and, per node class c (same topology, same free GPUs) and worker count m, v[c,m] the best
``min(intra, inter / f)`` of the class's subsets of m groups:

    maximise θ
    y[c,m] ∈ {0..n_c} nodes of class c taking m workers, z[c,m] ∈ {0,1} whether any does
    Σ_m y[c,m] ≤ n_c;  y[c,m] ≤ n_c z[c,m];  Σ m y[c,m] = W;  Σ y[c,m] ≥ 2;  θ ≤ v[c,m] + U (1 - z[c,m])

A solution whose nodes all sit under a lower switch is worth at least θ there too, so the best over every
domain of every allowed tier, and the best single node, is the optimum. HiGHS solves each program; θ is
snapped to the v it stands for.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from gputopo.placement.types import Request, Snapshot
from gputopo.sim.choices import eligible_sets, subset_choices

__all__ = ["ilp_optimum"]

_CLUSTER = "cluster"


@contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner on stdout when its first solver is made; `--json` output must stay one document."""
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_SOLVER: list[Any] = []


def _solver() -> Any:
    if not _SOLVER:
        try:
            import highspy
        except ImportError:
            raise RuntimeError("the ILP reference needs highspy (pip install 'gputopo[test]')") from None
        with _quiet_stdout():
            highs = highspy.Highs()  # type: ignore[no-untyped-call]
        highs.silent()
        _SOLVER.append(highs)
    highs = _SOLVER[0]
    highs.clearModel()
    return highs


def _solve(classes: Sequence[tuple[int, dict[int, float]]], workers: int) -> float | None:
    """θ of the program over node classes (count, value per worker count), or None when infeasible."""
    values = sorted({v for _, per_m in classes for v in per_m.values()})
    if not values:
        return None
    upper = values[-1]
    highs = _solver()
    theta = highs.addVariable(lb=0.0, ub=upper)
    total = 0
    count = 0
    for n, per_m in classes:
        ys = []
        for m, v in per_m.items():
            y = highs.addIntegral(lb=0, ub=n)
            z = highs.addBinary()
            highs.addConstr(y <= n * z)
            highs.addConstr(theta <= v + upper * (1 - z))
            ys.append(y)
            total = total + m * y
            count = count + y
        highs.addConstr(sum(ys[1:], ys[0]) <= n)
    highs.addConstr(total == workers)
    highs.addConstr(count >= 2)
    highs.maximize(theta)
    if str(highs.getModelStatus()) != "HighsModelStatus.kOptimal":
        return None
    found = highs.getInfo().objective_function_value
    # θ is one of the values (the smallest one chosen); undo the solver's tolerance.
    return max((v for v in values if v <= found + 1e-6 * max(1.0, abs(found))), default=None)


def _classes(
    snapshot: Snapshot, request: Request, nodes: list[int], factor: float
) -> list[tuple[int, dict[int, float]]]:
    counted: dict[tuple[int, frozenset[int]], list[int]] = defaultdict(list)
    for i in nodes:
        node = snapshot.nodes[i]
        counted[(id(node.topology), node.used_gpus)].append(i)
    out = []
    for members in counted.values():
        per_m: dict[int, float] = {}
        for choice in subset_choices(snapshot.nodes[members[0]], request):
            value = min(choice.intra_gbps, choice.inter_gbps / factor)
            per_m[choice.workers] = max(per_m.get(choice.workers, 0.0), value)
        if per_m:
            out.append((len(members), per_m))
    return out


def ilp_optimum(snapshot: Snapshot, request: Request) -> float | None:
    """The best figure of any valid placement, by one program per switch domain (no NVLink domains)."""
    if snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier):
        return None
    if any(snapshot.nvlink_domains):
        raise ValueError("the ILP reference does not model multi-node NVLink domains; use exhaustive_optimum")
    workers, tiers = request.workers, len(snapshot.tiers)
    top = tiers if request.required_tier is None else request.required_tier
    best: float | None = None
    for nodes in eligible_sets(snapshot, request):
        for i in nodes:
            for choice in subset_choices(snapshot.nodes[i], request):
                if choice.workers == workers and (best is None or choice.intra_gbps > best):
                    best = choice.intra_gbps
        if workers < 2:
            continue
        for tier in range(top + 1):
            factor = snapshot.tiers.oversubscription(tier)
            domains: dict[str, list[int]] = defaultdict(list)
            for i in nodes:
                domains[snapshot.domains[i][tier] if tier < tiers else _CLUSTER].append(i)
            for members in domains.values():
                if len(members) < 2:
                    continue
                classes = _classes(snapshot, request, members, factor)
                if best is not None and max(v for _, per_m in classes for v in per_m.values()) <= best:
                    continue
                theta = _solve(classes, workers)
                if theta is not None and (best is None or theta > best):
                    best = theta
    return best
