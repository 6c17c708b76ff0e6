"""The preemption metrics a pass's ended victims add to, and the preemptors it left waiting for a checkpoint."""

from __future__ import annotations

from prometheus_client import generate_latest

from gputopo.control.facts import JobKey
from gputopo.control.preemptpass import Ended
from gputopo.control.reconcile import PassResult
from gputopo.controller.metrics import Metrics


def test_each_ended_victim_is_counted_with_the_work_it_lost_by_source() -> None:
    metrics = Metrics()
    result = PassResult(
        preempted=[
            Ended(JobKey(("a", "low")), "trainingjob", 2.5),
            Ended(JobKey(("a", "podgroup/sweep")), "podgroup", 1.0),
            Ended(JobKey(("b", "low")), "trainingjob", 0.5),
        ]
    )
    metrics.observe_result(result, 0.01, 0, 0, 0)
    text = generate_latest(metrics.registry).decode()
    assert 'gputopo_preemptions_total{source="trainingjob"} 2.0' in text
    assert 'gputopo_preemptions_total{source="podgroup"} 1.0' in text
    assert 'gputopo_preemption_victim_gpu_hours_total{source="trainingjob"} 3.0' in text


def test_the_preemptors_waiting_for_a_checkpoint_are_those_of_the_last_pass() -> None:
    metrics = Metrics()
    metrics.observe_result(PassResult(waiting_for_checkpoint=2), 0.01, 0, 0, 0)
    assert "gputopo_preemptors_waiting_for_checkpoint 2.0" in generate_latest(metrics.registry).decode()
    metrics.observe_result(PassResult(), 0.01, 0, 0, 0)
    assert "gputopo_preemptors_waiting_for_checkpoint 0.0" in generate_latest(metrics.registry).decode()
