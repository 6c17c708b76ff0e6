"""``explain`` on plain objects: a pending job's reasons, its closest domains and what preemption would do; a
running job's place, bus bandwidth and the health under it."""

from __future__ import annotations

import pytest
from explain_builders import cluster

from gputopo.control.explain import explain_gang, explain_job
from gputopo.control.explain.reasons import PendingReason

TIER0 = {"topology": {"interNode": {"requiredTier": 0}}}


def _explain(c, name: str = "big"):  # type: ignore[no-untyped-def]
    built = c.build()
    job = built.job("default", name)
    assert job is not None
    return explain_job(built, job)


def test_shortfall_per_leaf_names_what_is_missing_and_why() -> None:
    c = cluster().node("a0").node("a1", cordoned=True).node("b0", leaf="leaf-1").node("b1", leaf="leaf-1")
    c.job("run", on=[("b0", list(range(8)))], priority=5)
    c.job("big", workers=2, priority=1, **TIER0)
    found = _explain(c)
    assert found.pending and [r.reason for r in found.reasons] == [PendingReason.TOPOLOGY_PLACEMENT_FAILED]
    words = [s["words"] for s in found.shortfall]
    assert words == [
        "spine-0/leaf-0: 1 of 2 nodes with 8 free GPUs, 2 needed; 1 node cordoned",
        "spine-0/leaf-1: 1 of 2 nodes with 8 free GPUs, 2 needed; 1 node busy",
    ]
    assert found.preemption is not None and found.preemption["possible"] is False
    assert "equal or higher priority" in found.preemption["words"]


def test_preemption_names_its_victim_when_the_class_may_preempt() -> None:
    c = cluster().priority_class("urgent", 1000).priority_class("batch", 10)
    c.node("a0").node("a1")
    c.job("low", on=[("a1", list(range(8)))], priority_class="batch")
    c.job("big", workers=2, priority_class="urgent", **TIER0)
    found = _explain(c)
    assert found.preemption is not None and found.preemption["possible"] is True
    assert found.preemption["victims"] == ["default/low"]
    assert "would end 1 gang in" in found.preemption["words"]
    text = "\n".join(found.lines())
    assert "Preemption: would end 1 gang" in text and "default/low (priority 10, 8 GPUs on a1" in text


def test_a_class_that_never_preempts_says_so() -> None:
    c = cluster().priority_class("polite", 1000, "Never").priority_class("batch", 10)
    c.node("a0").node("a1")
    c.job("low", on=[("a1", list(range(8)))], priority_class="batch")
    c.job("big", workers=2, priority_class="polite", **TIER0)
    found = _explain(c)
    assert found.preemption == {
        "priority": 1000,
        "preemptionPolicy": "Never",
        "possible": False,
        "words": "its class (priority 1000) has preemptionPolicy Never",
    }


def test_reasons_are_ranked_and_a_misconfigured_job_stops_there() -> None:
    c = cluster().node("a0").job("big", reason="InvalidSpec", message="fix the spec to queue the job")
    found = _explain(c)
    assert [(r.reason, r.message) for r in found.reasons] == [
        (PendingReason.MISCONFIGURED, "spec.priorityClassName: no PriorityClass named 'gone'")
    ]
    assert found.shortfall == [] and found.preemption is None


def test_waiting_for_kueue_is_waiting_for_quota() -> None:
    c = cluster().node("a0").job("big", reason="WaitingForKueue", message="waiting for Kueue to admit the job")
    data = _explain(c).to_data()
    assert data["reasons"][0]["reason"] == "WaitingForQuota" and data["reasons"][0]["rank"] == 1


def test_running_job_shows_its_place_bandwidth_and_the_faults_under_it() -> None:
    c = cluster().node("a0").node("a1").job("run", on=[("a0", [0, 1, 2, 3])]).link("a0", 0, 1).link("a0", 4, 5)
    c.nic("a0", "mlx5_0")
    found = _explain(c, "run")
    assert not found.pending
    assert found.placement is not None and found.placement["busBandwidthGBps"] == 370.5
    # the link 4-5 is not under the gang; a NIC it does not use is not either
    assert found.faults == [{"node": "a0", "part": "link 0-1", "state": "Down"}]
    assert "Links, NICs and GPUs under it: a0 link 0-1 Down" in found.lines()


def test_a_gang_waiting_for_another_gate() -> None:
    built = cluster().node("a0").gang("train", "Pending", "waiting for example.com/quota to be removed before planning")
    found = explain_gang(built.build(), built.build().gang("default", "job/train"))  # type: ignore[arg-type]
    assert found.pending and found.reasons[0].reason is PendingReason.WAITING_FOR_OTHER_GATES
    assert found.lines()[2] == "  1. WaitingForOtherGates: waiting for example.com/quota to be removed before planning"


def test_a_planned_gang_waiting_for_its_ranks_is_pending_and_shows_its_plan() -> None:
    built = cluster().node("a0").gang("half", "Planned", "waiting for ranks 1 to be created", ranks=[("a0", [0, 1])])
    live = built.build()
    record = live.gang("default", "job-half")
    assert record is not None
    found = explain_gang(live, record)
    assert found.pending and [r.reason for r in found.reasons] == [PendingReason.WAITING_FOR_RANKS]
    assert found.placement is not None and found.placement["workers"][0]["node"] == "a0"


MERGED = [
    (
        "same-words-other-counts",
        "needs 2 nodes with 8 free GPUs under one tier-0 switch; the largest such domain has 2 (x)",
        "needs 2 nodes with 8 free GPUs under one tier-0 switch; the largest such domain has 2 (x)",
    ),
    (
        "cannot-fit-the-empty-cluster-and-same-words",
        "cannot fit even the empty cluster: needs 2 nodes with 8 free GPUs under one tier-0 switch; the largest such "
        "domain has 2 (x)",
        "cannot fit even the empty cluster: needs 2 nodes with 8 free GPUs under one tier-0 switch",
    ),
    (
        "other-words",
        "needs more",
        "needs more; now: needs 2 nodes with 8 free GPUs under one tier-0 switch; the "
        "largest such domain has 1 (spine-0/leaf-0) (1 no free GPU)",
    ),
]


@pytest.mark.parametrize(("said", "shown"), [c[1:] for c in MERGED], ids=[c[0] for c in MERGED])
def test_the_operators_words_and_the_engines_now_are_one_reason(said: str, shown: str) -> None:
    c = cluster().node("a0").node("a1").job("run", on=[("a1", list(range(8)))], priority=9)
    c.job("big", workers=2, message=said, priority=1, gpu={"sameModel": False}, **TIER0)
    (reason,) = _explain(c).reasons
    assert reason.message.startswith(shown.split("; now: ")[0])
    assert ("; now: " in reason.message) == ("; now: " in shown)
