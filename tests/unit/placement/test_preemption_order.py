"""The search meets candidate domains in the same order whether every bound is worked out first or the work
bounds a priority level at a time (``_cheapest_first``): on seeded random clusters, the lazy order equals the
eager one (``domain_bound`` of every domain, sorted), so the victims chosen are the same."""

from __future__ import annotations

import random

import pytest

from gputopo.placement import Request
from gputopo.placement.preemption import PreemptionRules, Preemptor, RunningIndex
from gputopo.placement.preemption.bounds import domain_bound
from gputopo.placement.preemption.domains import CLUSTER, Domain, candidate_domains
from gputopo.placement.preemption.victims import _cheapest_first, _Search
from gputopo.sim.preemption.occupied import occupied_cluster


def _eager(search: _Search, leveled: list[tuple[int, Domain]]) -> list[tuple[tuple[int, float], str]]:
    request = search.request
    out = []
    for _, domain in leveled:
        nodes = [search.node_victims(i, len(domain.nodes) == 1) for i in domain.nodes]
        found = domain_bound(nodes, request.workers, request.gpus_per_worker, search.levels)
        assert found is not None
        out.append(((found[0], found[1]), domain))
    out.sort(key=lambda b: (b[1].level == CLUSTER, b[0], b[1].rank, b[1].name))
    return [(bound, domain.name) for bound, domain in out]


@pytest.mark.parametrize("seed", range(6), ids=[f"seed-{s}" for s in range(6)])
def test_lazy_domain_order_equals_eager(seed: int) -> None:
    # Mixed nodes, most GPUs held by gangs of 1-8 GPUs or of 2-4 whole nodes, priorities 0-3; some free.
    snap, gangs = occupied_cluster(seed, 160, multi_node_share=0.2, widths=(2, 4), held_share=0.85, priorities=range(4))
    index = RunningIndex(snap, gangs)
    rng = random.Random(seed)
    for shape in [(1, 8), (2, 8), (4, 8), (8, 4), (16, 2)]:
        wanted = Preemptor(Request(*shape, name=f"p-{shape}", same_model=False), rng.randint(1, 4))
        search = _Search(index, wanted, PreemptionRules(now=10_000.0))
        domains = candidate_domains(index.snapshot, wanted.request, search.useful())
        leveled = [(level, d) for d in domains if (level := search.level(d)) is not None]
        lazy = [(bound, domain.name) for bound, domain in _cheapest_first(search, leveled)]
        assert lazy == _eager(search, leveled)
