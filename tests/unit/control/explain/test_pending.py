"""Counting the waiting gangs by reason, as the operator's ``gputopo_pending_gangs`` gauge exports them."""

from __future__ import annotations

from explain_builders import cluster

from gputopo.control.explain.pending import pending_by_reason
from gputopo.controller.metrics import Metrics


def _built():  # type: ignore[no-untyped-def]
    c = cluster().node("a0").node("a1")
    c.job("run", on=[("a0", list(range(8)))])
    c.job("big", workers=4, reason="Unplaceable")
    c.job("bigger", workers=8, reason="WaitingForCapacity")
    c.job("typo", reason="InvalidSpec")
    c.job("queued", reason="WaitingForKueue")
    c.gang("idx", "Pending", "its size is not known yet (its owner is not read yet, or does not say)")
    c.gang("ran", "Running", ranks=[("a1", [0, 1])])
    return c.build()


def test_pending_by_reason_counts_jobs_and_gangs_that_wait() -> None:
    built = _built()
    assert pending_by_reason(built.jobs, built.gangs) == {
        "TopologyPlacementFailed": 2,
        "Misconfigured": 1,
        "WaitingForQuota": 1,
        "WaitingForRanks": 1,
    }


def test_the_gauge_has_every_reason_and_zero_for_those_not_seen() -> None:
    built = _built()
    metrics = Metrics()
    metrics.observe_pending(pending_by_reason(built.jobs, built.gangs))
    value = metrics.registry.get_sample_value
    assert value("gputopo_pending_gangs", {"reason": "TopologyPlacementFailed"}) == 2
    assert value("gputopo_pending_gangs", {"reason": "WaitingForRanks"}) == 1
    assert value("gputopo_pending_gangs", {"reason": "WaitingForPreemptedWorkloads"}) == 0
