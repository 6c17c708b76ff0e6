"""The fair queue on plain data: a job that cannot fit the empty cluster never heads a queue, and a starving head
holds back only its own queue (its namespace, or its Kueue ClusterQueue), never another tenant's jobs."""

from __future__ import annotations

import pytest
from control_builders import at

from gputopo.control.facts import JobKey
from gputopo.control.queue import NEVER_FITS, Limits, Outcome, QueuedJob, drain
from gputopo.placement import Placement, Request, Snapshot, place
from gputopo.placement.types import NodeInfo
from gputopo.topology.catalog import load_node_type

LONG_AGO = 0.0
NOW = 1000.0  # the heads below have waited past the starvation limit (300 s)


def job(
    ns: str, name: str, gpus: int, priority: int, since: float, queue: str = "", selector: dict[str, str] | None = None
) -> QueuedJob:
    request = Request(workers=1, gpus_per_worker=gpus, name=name, node_selector=selector or {})
    return QueuedJob(JobKey((ns, name)), priority, at(since), request, queue=queue)


def half_used() -> Snapshot:
    return Snapshot([NodeInfo("n1", load_node_type("hgx-h100"), used_gpus=frozenset(range(4)))])


CASES = [
    # (case, jobs, names placed, names told to wait behind another)
    (
        "more-gpus-than-the-cluster-heads-nothing",
        [job("a", "huge", 16, 100, LONG_AGO), job("b", "small", 2, 0, 10), job("a", "own", 2, 0, 11)],
        {"small", "own"},
        set(),
    ),
    (
        "a-label-no-node-has-heads-nothing",
        [job("a", "nowhere", 1, 100, LONG_AGO, selector={"pool": "none"}), job("b", "small", 2, 0, 10)],
        {"small"},
        set(),
    ),
    (
        "a-starving-head-holds-back-only-its-namespace",
        [job("a", "big", 8, 100, LONG_AGO), job("b", "other", 2, 0, 10), job("a", "mine", 2, 0, 11)],
        {"other"},
        {"mine"},
    ),
    (
        "a-starving-head-holds-back-its-whole-cluster-queue",
        [
            job("a", "big", 8, 100, LONG_AGO, queue="clusterqueue/shared"),
            job("b", "other", 2, 0, 10, queue="clusterqueue/shared"),
            job("c", "elsewhere", 2, 0, 11, queue="clusterqueue/own"),
        ],
        {"elsewhere"},
        {"other"},
    ),
]


@pytest.mark.parametrize(("case", "jobs", "placed", "behind"), CASES, ids=[c[0] for c in CASES])
def test_the_starvation_rule_holds_back_only_its_own_queue(
    case: str, jobs: list[QueuedJob], placed: set[str], behind: set[str]
) -> None:
    outcomes, _ = drain(half_used(), jobs, place, at(NOW), Limits(starvation_seconds=300))
    assert {o.queued.name for o in outcomes if isinstance(o.result, Placement)} == placed
    waiting = {o.queued.name for o in outcomes if not isinstance(o.result, Placement)}
    assert {n for n in waiting if "waiting behind" in str(_result(outcomes, n))} == behind


def _result(outcomes: list[Outcome], name: str) -> object:
    return next(o.result for o in outcomes if o.queued.name == name)


def test_a_job_that_fits_no_cluster_is_told_so_at_once() -> None:
    outcomes, _ = drain(half_used(), [job("a", "huge", 16, 0, NOW)], place, at(NOW), Limits(starvation_seconds=300))
    assert str(outcomes[0].result).startswith(NEVER_FITS)


def test_a_job_that_fits_the_empty_cluster_still_heads_its_queue() -> None:
    """Only a job no emptying could place is kept from heading: one that waits for GPUs in use starves its queue."""
    jobs = [job("a", "big", 8, 100, LONG_AGO), job("a", "small", 2, 0, 10)]
    outcomes, _ = drain(half_used(), jobs, place, at(NOW), Limits(starvation_seconds=300))
    assert "waiting behind big" in str(_result(outcomes, "small"))
    assert not str(_result(outcomes, "big")).startswith(NEVER_FITS)


def test_a_job_waiting_behind_another_namespaces_head_of_a_shared_cluster_queue_is_told_its_uid_only() -> None:
    head = job("a", "big", 8, 100, LONG_AGO, queue="clusterqueue/shared")
    jobs = [QueuedJob(head.key, head.priority, head.queued_since, head.request, queue=head.queue, uid="7f3c-0a1e")]
    jobs += [job("b", "other", 2, 0, 10, queue="clusterqueue/shared"), job("a", "mine", 2, 0, 11)]
    jobs[-1] = QueuedJob(jobs[-1].key, 0, at(11), jobs[-1].request, queue="clusterqueue/shared")
    outcomes, _ = drain(half_used(), jobs, place, at(NOW), Limits(starvation_seconds=300))
    theirs, mine = str(_result(outcomes, "other")), str(_result(outcomes, "mine"))
    assert "waiting behind a job of another namespace (UID 7f3c-0a1e)" in theirs and " big " not in theirs
    assert "waiting behind big" in mine
