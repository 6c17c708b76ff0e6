"""Planning one gang has a time budget: a gang of many exclusive parts, declared by one pod's owner, is tried part
by part in every free domain; past the budget it is Unplaceable for the pass, saying so, instead of holding the
operator's event loop for as long as the search takes."""

from __future__ import annotations

import time

from placement_builders import TIER0, node, snapshot

from gputopo.gangs.model import Declared, Gang, GangId, Needs
from gputopo.gangs.planning import GangPlan, plan_gang
from gputopo.placement import place
from gputopo.placement.types import DEFAULT_TIERS, Unplaceable

POOL = "cloud.google.com/gke-nodepool"


def _exclusive(parts: int) -> Gang:
    declared = Declared(parts, (8,) * parts, parts=tuple(f"job-{k}" for k in range(parts)))
    return Gang(GangId("team-a", "jobset", "wide"), declared, needs=Needs(exclusive_label=POOL))


class Calls:
    """An ``out_of_time`` that is spent after ``allowed`` checks."""

    def __init__(self, allowed: int) -> None:
        self.allowed, self.checks = allowed, 0

    def __call__(self) -> bool:
        self.checks += 1
        return self.checks > self.allowed


def test_a_gang_past_its_budget_is_unplaceable_saying_so() -> None:
    snap = snapshot(*(node(f"n{i}").leaf("l1").label(POOL, f"pool-{i}") for i in range(12)))
    spent = Calls(allowed=20)
    result = plan_gang(snap, _exclusive(12), DEFAULT_TIERS, place, out_of_time=spent)
    assert result == Unplaceable(
        "planning its 12 GPU ranks (12 requests) took longer than one gang may take in a pass: it is tried again "
        "in the next"
    )
    assert spent.checks == 21  # it stopped at the first check past the budget
    assert isinstance(plan_gang(snap, _exclusive(12), DEFAULT_TIERS, place), GangPlan)  # no budget: planned


def test_the_budget_bounds_the_time_one_wide_gang_takes() -> None:
    """48 exclusive parts on 48 one-node pools: some 1,200 engine calls unbounded; a 0.05 s budget ends it."""
    snap = snapshot(*(node(f"n{i}").leaf("l1").label(POOL, f"pool-{i}") for i in range(48)))
    started = time.perf_counter()
    ends = started + 0.05
    result = plan_gang(snap, _exclusive(48), DEFAULT_TIERS, place, out_of_time=lambda: time.perf_counter() > ends)
    assert isinstance(result, Unplaceable) and "took longer than one gang may take" in result.reason
    assert time.perf_counter() - started < 1.0


def test_under_a_required_tier_the_best_domain_found_before_the_budget_is_kept() -> None:
    """Two units (8 and 4 GPUs) in one leaf: the first leaf tried holds both; the budget then ends the search."""
    snap = snapshot(*(node(f"n{i}").leaf(f"leaf-{i // 2}") for i in range(8)))
    gang = Gang(GangId("team-a", "gputopo", "g"), Declared(2, (8, 4)), needs=Needs(required_label=TIER0))
    spent = Calls(allowed=2)  # one check per unit of the first leaf; the next check ends the search
    plan = plan_gang(snap, gang, DEFAULT_TIERS, place, out_of_time=spent)
    assert isinstance(plan, GangPlan) and len(plan.workers) == 2
    assert spent.checks == 3
