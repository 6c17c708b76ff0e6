"""A preemptor that may wait for its victims' next checkpoint: when it waits, until when, and when it does not."""

from __future__ import annotations

import pytest
from placement_builders import node, snapshot
from preemption_builders import gang, preemptor, running

from gputopo.placement.preemption import NoPreemption, PreemptionPlan, PreemptionRules, RunningGang, plan_preemption

HALF_HOUR = 1_800.0


def test_a_declared_interval_gives_the_last_and_next_checkpoint() -> None:
    _, (g,) = running(snapshot(node("n0")), gang("g").on("n0", *range(8)).started(100).every(HALF_HOUR))
    assert g.last_checkpoint(100 + 2 * HALF_HOUR + 5) == 100 + 2 * HALF_HOUR
    assert g.next_checkpoint(100 + 2 * HALF_HOUR + 5) == 100 + 3 * HALF_HOUR
    assert g.work_lost(100 + 2 * HALF_HOUR + 5) == 8 * 5
    # A checkpoint the trainer wrote resets the schedule; without an interval nothing is known of the next.
    _, (h,) = running(snapshot(node("n0")), gang("h").on("n0", *range(8)).started(0).checkpointed(700).every(600))
    assert h.last_checkpoint(1_350) == 1_300 and h.next_checkpoint(1_350) == 1_900
    plain = RunningGang("p", 0, g.placement, start_time=0.0, checkpoint_time=50.0)
    assert plain.next_checkpoint(1_000) is None and plain.work_lost(1_000) == 8 * 950


def _wide_victim(checkpoint_in: float) -> tuple[list[RunningGang], object]:
    """One 8-node low gang on the only 8 nodes; a half-hourly checkpoint due ``checkpoint_in`` s after 10,000."""
    nodes = [node(f"n{i}") for i in range(8)]
    start = 10_000.0 + checkpoint_in - 4 * HALF_HOUR
    snap, gangs = running(
        snapshot(*nodes), gang("wide").on_each([f"n{i}" for i in range(8)], *range(8)).started(start).every(HALF_HOUR)
    )
    return gangs, snap


def test_waits_for_the_victims_checkpoint_then_preempts_at_it() -> None:
    """The victim is two minutes from its checkpoint: preempting now loses 64 GPUs x 28 min; the 8-GPU preemptor
    may wait ten minutes, so it is told to come back at the checkpoint, and then the victim loses nothing."""
    gangs, snap = _wide_victim(120)
    wanted = preemptor(1, 8, checkpoint_wait=600, waiting_since=9_990)
    result = plan_preemption(snap, wanted, gangs, PreemptionRules(now=10_000))
    assert isinstance(result, NoPreemption) and result.retry_at == 10_120
    assert "checkpoint in 120 s" in result.reason and result.details == ("wide",)
    plan = plan_preemption(snap, wanted, gangs, PreemptionRules(now=10_120))
    assert isinstance(plan, PreemptionPlan) and [v.name for v in plan.victims] == ["wide"]
    assert plan.cost.work_lost_gpu_s == 0


@pytest.mark.parametrize(
    ("wait", "waiting_since", "checkpoint_in", "why"),
    [
        (0, 9_990, 120, "an urgent class preempts at once"),
        (600, 9_990, 900, "the checkpoint is past its wait"),
        (600, 9_500, 120, "it has waited most of its wait already: the checkpoint is past what is left"),
        (600, 9_990, 1_790, "the victim checkpointed ten seconds ago: little to spare"),
    ],
)
def test_preempts_now(wait: float, waiting_since: float, checkpoint_in: float, why: str) -> None:
    gangs, snap = _wide_victim(checkpoint_in)
    wanted = preemptor(1, 8, checkpoint_wait=wait, waiting_since=waiting_since)
    assert isinstance(plan_preemption(snap, wanted, gangs, PreemptionRules(now=10_000)), PreemptionPlan), why


def test_a_wide_preemptor_does_not_idle_longer_than_the_work_it_spares() -> None:
    """A one-node victim five minutes from its checkpoint spares 8 GPUs x 25 min by waiting; a 64-GPU preemptor
    (the victim's node and seven free ones) waiting those five minutes idles more (64 x 5 min): it preempts now.
    An 8-GPU preemptor for the same node idles 8 x 5 min: it waits."""
    victim = gang("g").on("n7", *range(8)).started(10_300 - 4 * HALF_HOUR).every(HALF_HOUR)
    snap, gangs = running(snapshot(*(node(f"n{i}") for i in range(8))), victim)
    wide = preemptor(8, 8, checkpoint_wait=600, waiting_since=10_000)
    plan = plan_preemption(snap, wide, gangs, PreemptionRules(now=10_000))
    assert isinstance(plan, PreemptionPlan) and plan.cost.work_lost_gpu_s == 8 * 1_500
    snap, gangs = running(snapshot(node("n7")), victim)
    narrow = preemptor(1, 8, checkpoint_wait=600, waiting_since=10_000)
    result = plan_preemption(snap, narrow, gangs, PreemptionRules(now=10_000))
    assert isinstance(result, NoPreemption) and result.retry_at == 10_300


def test_plans_are_compared_by_what_they_lose_at_the_victims_checkpoint() -> None:
    """Now, the gang on n0 loses less (20 min of 8 GPUs) than the one on n1 (28 min); but n1's checkpoints in
    two minutes and n0's declares no interval. A preemptor that may wait clears n1 then; one that may not
    clears n0 now."""
    snap, gangs = running(
        snapshot(node("n0"), node("n1")),
        gang("steady").on("n0", *range(8)).started(10_000 - 1_200),
        gang("due").on("n1", *range(8)).started(10_120 - 4 * HALF_HOUR).every(HALF_HOUR),
    )
    waiting = plan_preemption(snap, preemptor(1, 8, checkpoint_wait=600), gangs, PreemptionRules(now=10_000))
    assert isinstance(waiting, NoPreemption) and waiting.retry_at == 10_120 and waiting.details == ("due",)
    urgent = plan_preemption(snap, preemptor(1, 8), gangs, PreemptionRules(now=10_000))
    assert isinstance(urgent, PreemptionPlan) and [v.name for v in urgent.victims] == ["steady"]
