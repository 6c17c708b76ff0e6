"""Queue order and backfill, and the flap damping of new plans, on plain data."""

from __future__ import annotations

import pytest
from control_builders import T0, at

from gputopo.api.nodetopology import LinkState
from gputopo.control.quarantine import Quarantine
from gputopo.control.queue import Limits, QueuedJob, drain, order
from gputopo.placement import Placement, Request, Snapshot, place
from gputopo.placement.types import NodeInfo, Unplaceable
from gputopo.topology.catalog import load_node_type


def queued(name: str, gpus: int, priority: int = 0, since: float = 0.0) -> QueuedJob:
    return QueuedJob(("ns", name), priority, at(since), Request(workers=1, gpus_per_worker=gpus, name=name))


def one_node(used: int = 0) -> Snapshot:
    return Snapshot([NodeInfo("n1", load_node_type("hgx-h100"), used_gpus=frozenset(range(used)))])


def test_order_is_priority_then_age() -> None:
    jobs = [queued("old-low", 1, 0, 0), queued("new-high", 1, 5, 9), queued("old-high", 1, 5, 1)]
    assert [q.name for q in order(jobs)] == ["old-high", "new-high", "old-low"]


@pytest.mark.parametrize(
    ("waited", "placed"),
    [(10.0, {"small"}), (400.0, set())],
    ids=["smaller-job-backfills", "starving-head-stops-backfill"],
)
def test_backfill_until_the_head_starves(waited: float, placed: set[str]) -> None:
    jobs = [queued("big", 8, priority=5, since=0), queued("small", 2, priority=0, since=1)]
    outcomes, _ = drain(one_node(used=4), jobs, place, at(waited), Limits(starvation_seconds=300))
    assert {o.queued.name for o in outcomes if isinstance(o.result, Placement)} == placed


def test_one_pass_reserves_each_placement_before_the_next() -> None:
    outcomes, snapshot = drain(one_node(), [queued(f"j{i}", 4, since=i) for i in range(3)], place, T0, Limits(300))
    assert [isinstance(o.result, Placement) for o in outcomes] == [True, True, False]
    assert snapshot.used_gpus == 8


LIMITED = [
    # (case, jobs as (name, gpus), limit, names placed, names tried)
    ("stops-after-the-limit", [("a", 2), ("b", 2), ("c", 2)], 2, ["a", "b"], ["a", "b"]),
    ("refusals-do-not-count", [("big", 16), ("a", 2), ("b", 2)], 2, ["a", "b"], ["big", "a", "b"]),
    ("no-limit-tries-all", [("a", 2), ("b", 2), ("c", 2)], None, ["a", "b", "c"], ["a", "b", "c"]),
]


@pytest.mark.parametrize(("case", "jobs", "limit", "placed", "tried"), LIMITED, ids=[c[0] for c in LIMITED])
def test_a_pass_stops_after_its_placement_limit(
    case: str, jobs: list[tuple[str, int]], limit: int | None, placed: list[str], tried: list[str]
) -> None:
    """The jobs after the limit get no outcome: they stay queued, in order, for the next pass."""
    queue = [queued(name, gpus, since=i) for i, (name, gpus) in enumerate(jobs)]
    outcomes, snapshot = drain(one_node(), queue, place, T0, Limits(300, placements=limit))
    assert [o.queued.name for o in outcomes] == tried
    assert [o.queued.name for o in outcomes if isinstance(o.result, Placement)] == placed
    assert snapshot.used_gpus == 2 * len(placed)


BUDGETED = [
    # (case, jobs as (name, gpus), seconds each decision takes, budget, names tried)
    ("stops-once-the-budget-is-spent", [("a", 2), ("b", 2), ("c", 2)], 0.1, 0.15, ["a", "b"]),
    ("a-refusal-alone-never-stops-it", [("big", 16), ("a", 2), ("b", 2)], 1.0, 0.5, ["big", "a"]),
    ("within-the-budget-tries-all", [("a", 2), ("b", 2), ("c", 2)], 0.1, 1.0, ["a", "b", "c"]),
]


@pytest.mark.parametrize(("case", "jobs", "step", "budget", "tried"), BUDGETED, ids=[c[0] for c in BUDGETED])
def test_a_pass_stops_once_it_has_planned_its_budget(
    case: str, jobs: list[tuple[str, int]], step: float, budget: float, tried: list[str]
) -> None:
    """At least one job is placed whatever the budget, so a pass always gets somewhere."""
    now = [0.0]

    def slow_place(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
        now[0] += step  # each decision takes ``step`` seconds of the pass's clock
        return place(snapshot, request)

    queue = [queued(name, gpus, since=i) for i, (name, gpus) in enumerate(jobs)]
    outcomes, _ = drain(one_node(), queue, slow_place, T0, Limits(300, planning_seconds=budget, clock=lambda: now[0]))
    assert [o.queued.name for o in outcomes] == tried


def test_a_flapping_link_stays_quarantined_after_it_reads_up() -> None:
    healthy = load_node_type("hgx-h100")
    down = healthy.with_link_state(0, 1, LinkState.DOWN)
    quarantine = Quarantine(seconds=30)
    for t in range(0, 10):  # down/up every half second for five seconds
        quarantine.observe("n1", down if t % 2 == 0 else healthy, at(t * 0.5))
    masked = quarantine.mask("n1", healthy, at(10))
    assert masked.link(0, 1).state is LinkState.DOWN and masked.link(2, 3).state is LinkState.UP
    assert quarantine.mask("n1", healthy, at(40)) is healthy


@pytest.mark.parametrize(
    "status",
    [None, "nonsense", {"gpus": [{"index": 1}]}, {"gpus": [{"index": 0}, {"index": 1}], "links": []}],
    ids=["no-status", "not-a-mapping", "gpu-indices-not-from-zero", "pair-without-link"],
)
def test_an_odd_nodetopology_gives_facts_without_a_model(status: object) -> None:
    from gputopo.control.topologies import topology_facts

    facts = topology_facts({"metadata": {"name": "n1"}, "status": status})
    assert facts.name == "n1" and facts.topology is None


def test_a_pod_entry_keeps_the_time_its_gpus_first_appeared() -> None:
    from gputopo.control.podgpus import pod_gpus_facts

    def report(gpus: list[int], t: float) -> dict[str, object]:
        pods = [{"namespace": "a", "name": "p", "gpus": gpus}]
        return {"status": {"observedAt": at(t).isoformat(), "pods": pods}}

    first = pod_gpus_facts("n1", report([0, 1], 0), None, at(100))
    same = pod_gpus_facts("n1", report([0, 1], 5), first, at(100))
    moved = pod_gpus_facts("n1", report([2, 3], 9), same, at(100))
    assert same.pod_since[("a", "p")] == at(0) and moved.pod_since[("a", "p")] == at(9)
    assert same == first, "a heartbeat (the same pods, later) is no change: it wakes no pass"
    assert same.seen_at == at(5)


def test_a_pod_report_that_does_not_parse_says_nothing() -> None:
    from gputopo.control.podgpus import pod_gpus_facts

    facts = pod_gpus_facts("n1", {"status": {"pods": [{"name": 3}]}}, None, at(0))
    assert facts.pods == () and facts.seen_at is None
