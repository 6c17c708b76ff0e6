"""`gputopo demo`'s examples on the demo's cluster, in every order they may arrive in: each is placed.

The cluster is the sandbox's mixed profile at the demo's node count, as the placement engine sees it; the examples
are read as the operator reads them (a TrainingJob's spec, a gang through the gang reader and ``plan_gang``). After
each arrival a pass places the waiting jobs, highest priority first, as the operator's queue does. A TrainingJob's
pods run on (kwok keeps them running), so its GPUs stay held; a Job's pods end as soon as they run (kwok's
pod-complete stage), so a gang of a Job gives its GPUs back once placed. Nothing is preempted: every example must
fit beside the others, whatever the order.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.api.trainingjob import TrainingJobSpec
from gputopo.cli.demo import NODES, PRIORITY_CLASSES, Order, arrival_order
from gputopo.cli.plan_gang import gang_of
from gputopo.gangs.planning import GangPlan, plan_gang
from gputopo.placement import DEFAULT_TIERS, NodeInfo, Placement, Request, Snapshot, place
from gputopo.sandbox.profiles import TIER0_LABEL, TIER1_LABEL, plan_nodes
from gputopo.topology.catalog import load_node_type

EXAMPLES = Path(__file__).parents[3] / "examples"


def demo_cluster(nodes: int) -> Snapshot:
    return Snapshot(
        NodeInfo(p.name, load_node_type(p.node_type), labels={TIER0_LABEL: p.leaf, TIER1_LABEL: p.spine})
        for p in plan_nodes("mixed", nodes)
    )


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


CLASSES = {d["metadata"]["name"]: d["value"] for d in _documents(EXAMPLES / PRIORITY_CLASSES)}


class Example:
    """One example manifest: its priority, and how it is placed on a snapshot (a TrainingJob's GPUs stay held)."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.documents = _documents(path)
        job = next((d for d in self.documents if d.get("kind") == "TrainingJob"), None)
        self.spec = TrainingJobSpec.model_validate(job["spec"]) if job is not None else None
        self.priority = CLASSES.get(self.spec.priority_class_name or "", 0) if self.spec is not None else 0

    def place(self, snapshot: Snapshot) -> Snapshot | None:
        """The snapshot after it is placed (unchanged for a gang whose pods end at once), or None: it waits."""
        if self.spec is not None:
            found = place(snapshot, Request.from_spec(self.spec, name=self.name))
            return snapshot.reserve(found) if isinstance(found, Placement) else None
        gang = gang_of(Path(self.name), self.documents, snapshot)
        return snapshot if isinstance(plan_gang(snapshot, gang, DEFAULT_TIERS, place), GangPlan) else None


def never_placed(order: list[Path], nodes: int) -> list[str]:
    """The examples still waiting once all have arrived in ``order``."""
    snapshot = demo_cluster(nodes)
    waiting: list[Example] = []
    for path in order:
        if path.name == PRIORITY_CLASSES:
            continue
        waiting.append(Example(path))
        for example in sorted(waiting, key=lambda e: -e.priority):
            after = example.place(snapshot)
            if after is not None:
                snapshot = after
                waiting.remove(example)
    return sorted(e.name for e in waiting)


def _orders() -> list[list[Path]]:
    jobs = arrival_order(EXAMPLES, Order.NAME)[1:]
    return [[EXAMPLES / PRIORITY_CLASSES, *order] for order in itertools.permutations(jobs)]


def test_the_demo_has_a_gang_gputopo_does_not_own_among_its_examples() -> None:
    assert any(Example(p).spec is None for p in arrival_order(EXAMPLES, Order.NAME)[1:])


def test_every_example_is_placed_on_the_demos_cluster_whatever_order_they_arrive_in() -> None:
    left = {tuple(p.name for p in order[1:]): never_placed(order, NODES) for order in _orders()}
    assert {order: names for order, names in left.items() if names} == {}


@pytest.mark.parametrize("order", list(Order), ids=[o.value for o in Order])
def test_the_priority_classes_come_first_in_every_order(order: Order) -> None:
    paths = arrival_order(EXAMPLES, order, random.Random(7))
    assert paths[0].name == PRIORITY_CLASSES
    assert sorted(paths[1:]) == sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != PRIORITY_CLASSES)
    if order is Order.REVERSE:
        assert paths[1:] == sorted(paths[1:], reverse=True)
