"""An idle control pass decides the usual job shapes ahead, so the first burst after a restart finds the
planner's tables built (gputopo.control.warmup)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from control_builders import at, cluster, job
from pass_builders import CONFIG

from gputopo.control.facts import JobFacts, JobKey
from gputopo.control.queue import Limits
from gputopo.control.reconcile import PassInput, PassRules, run_pass
from gputopo.control.view import build_snapshot
from gputopo.control.warmup import warm, warm_shapes
from gputopo.placement import place
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import GpuChoice, Placement, Policy, Request, Snapshot, Unplaceable


def ticks(step: float) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


def recording(decided: list[tuple[int, int]]) -> Policy:
    def policy(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
        decided.append((request.workers, request.gpus_per_worker))
        return place(snapshot, request)

    return policy


def test_the_shapes_are_powers_of_two_up_to_each_node_size_then_whole_nodes() -> None:
    view = cluster().node("h", "hgx-h100").tray("t", "rack-1").view()
    assert warm_shapes(view) == ((1, 1), (1, 2), (1, 4), (2, 4), (4, 4), (1, 8), (2, 8), (4, 8))
    assert warm_shapes(cluster().view()) == ()


def test_warming_stops_once_its_budget_is_spent_and_goes_on_from_there_next_time() -> None:
    view = cluster().node("n1").node("n2").view()
    cache, decided = PlacementCache(), list[tuple[int, int]]()
    clock = ticks(1.0).__next__
    shapes = warm_shapes(view)

    def build() -> Snapshot:
        return build_snapshot(view, [], CONFIG.tiers, None, at(10), cache)

    first = warm(build, cache, shapes, recording(decided), GpuChoice.PLANNED, clock, 1.5)
    assert first == 2 and decided == list(shapes[:2])
    second = warm(build, cache, shapes, recording(decided), GpuChoice.PLANNED, clock, 1.5)
    assert second == 2 and decided == list(shapes[:4])  # nothing decided twice
    assert cache.size() > 0  # the tables the decisions built stay in the cache


def test_nothing_left_to_warm_builds_no_snapshot() -> None:
    cache = PlacementCache()
    cache.warmed.update({(1, 1), (1, 8)})

    def build() -> Snapshot:
        raise AssertionError("no snapshot wanted")

    assert warm(build, cache, [(1, 1), (1, 8)], place, GpuChoice.PLANNED, ticks(1.0).__next__, 1.0) == 0


def test_an_idle_pass_warms_and_a_pass_with_work_or_writes_out_does_not() -> None:
    view = cluster().node("n1").view()
    clock = ticks(0.0).__next__

    def pass_with(jobs: Sequence[JobFacts], busy: frozenset[JobKey] = frozenset()) -> tuple[int, PlacementCache]:
        cache = PlacementCache()
        result = run_pass(
            PassInput({j.key: j for j in jobs}, {}, view, at(10), busy=busy, cache=cache),
            PassRules(CONFIG, place, Limits(clock=clock)),
        )
        return result.warmed, cache

    warmed, cache = pass_with([])
    assert warmed == len(warm_shapes(view)) and cache.warmed == set(warm_shapes(view))
    queued = job("j", gpus=2)
    assert pass_with([queued])[0] == 0
    assert pass_with([queued], busy=frozenset({queued.key}))[0] == 0
