"""The NVLink-domain planner decides as it did before it was made to scale: every recorded NVL72 decision
(``nvl72_cases``) again, placed cold and then warm on the same snapshot."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nvl72_cases import (
    FIXTURE,
    RANDOM_CLUSTERS,
    SIMULATIONS,
    decide_in_turn,
    encode,
    named_cases,
    random_requests,
    simulated,
)

from gputopo.placement import place

RECORD: dict[str, Any] = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize(("name", "snap", "requests"), list(named_cases()), ids=[c[0] for c in named_cases()])
def test_named_cases_decide_as_recorded(name: str, snap: Any, requests: Any) -> None:
    assert decide_in_turn(snap, requests) == RECORD["named"][name]


@pytest.mark.parametrize("block", range(8), ids=[f"clusters-{b * 50}-{b * 50 + 49}" for b in range(8)])
def test_random_clusters_decide_as_recorded(block: int) -> None:
    assert len(RECORD["random"]) == RANDOM_CLUSTERS
    for seed in range(block * 50, min(RANDOM_CLUSTERS, block * 50 + 50)):
        snap, drawn, requests = random_requests(seed)
        recorded = RECORD["random"][seed]
        assert recorded["cluster"] == drawn, f"seed {seed}: the generator drew another cluster"
        assert decide_in_turn(snap, requests) == recorded["decisions"], f"seed {seed}: {drawn}"
        # The first snapshot again, its tables built by the first decision: warm decides as cold did.
        first = place(snap, requests[0])
        assert encode(first) == recorded["decisions"][0], f"seed {seed}, placed again"


@pytest.mark.parametrize(
    ("name", "interarrival", "seed", "cap"),
    [(n, i, s, cap) for n, i, s in SIMULATIONS for cap in (16, 18)],
    ids=[f"{n}-cap{cap}" for n, _, _ in SIMULATIONS for cap in (16, 18)],
)
def test_bench_nvl72_replays_decide_as_recorded(name: str, interarrival: float, seed: int, cap: int) -> None:
    again = simulated(name, interarrival, seed, cap)
    recorded = RECORD["simulated"][f"{name}-cap{cap}"]
    assert again["jobs"] == recorded["jobs"]
    assert (again["calls"], again["sha256"]) == (recorded["calls"], recorded["sha256"])


def test_the_record_covers_multi_rack_gangs_and_refusals() -> None:
    decisions = [d for case in RECORD["random"] for d in case["decisions"]]
    placed = [d for d in decisions if "ranks" in d]
    multi_rack = [d for d in placed if "," in d["racks"]]
    assert len(RECORD["random"]) >= 300 and len(multi_rack) >= 100
    assert len(decisions) - len(placed) >= 100
