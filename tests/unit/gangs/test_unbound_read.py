"""kube-scheduler's refusals as the gang reader and the PodGroup watch read them: a steered pod's ``PodScheduled``
False (any reason but ``SchedulingGated``) on its member, the PodGroup's scheduled condition on its gang."""

from __future__ import annotations

from typing import Any

from gputopo.api.group import ANNOTATION_GANG
from gputopo.controller.gangwatches import trim_pod_group
from gputopo.gangs.claims import Owners
from gputopo.gangs.read import read_gangs

NS = "team"
WHY = "all pods in a single pod group should have the same priority as the pod group's priority, got 100 and 0"
REFUSED = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError", "message": WHY}


def _group(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "pg", "namespace": NS, "uid": "pg-uid"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    return {**body, "status": status} if status is not None else body


def _pod(rank: int, conditions: list[dict[str, Any]], gated: bool = False) -> dict[str, Any]:
    """A pod of the group: steered (its gang's annotation on it), or still held by gputopo's gate."""
    meta: dict[str, Any] = {"name": f"pg-{rank}", "namespace": NS, "uid": f"u{rank}"}
    meta["labels"] = {"gputopo.io/rank": str(rank)}
    if not gated:
        meta["annotations"] = {ANNOTATION_GANG: "podgroup/pg"}
    spec: dict[str, Any] = {
        "schedulingGroup": {"podGroupName": "pg"},
        "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }
    if gated:
        spec["schedulingGates"] = [{"name": "gputopo.io/placement"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "conditions": conditions}}


def test_a_steered_pods_scheduler_error_and_its_podgroups_condition_reach_the_gang() -> None:
    condition = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "SchedulerError", "message": WHY}
    watched = trim_pod_group({**_group({"conditions": [condition, {"type": "Other", "status": "True"}]})})
    assert watched["status"] == {"conditions": [condition]}
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    found = read_gangs([_pod(0, [REFUSED]), _pod(1, [gated], gated=True)], Owners(podgroups={(NS, "pg"): watched}))
    gang = found.gangs[0]
    assert gang.group_refusal is not None and gang.group_refusal.reason == "SchedulerError"
    refusals = {m.rank: m.refusal for m in gang.members}
    assert refusals[0] is not None and (refusals[0].reason, refusals[0].message) == ("SchedulerError", WHY)
    assert refusals[1] is None  # gated: nothing refused


def test_a_podgroup_with_no_condition_is_trimmed_as_any_owner() -> None:
    assert "status" not in trim_pod_group(_group({"conditions": []}))
    assert read_gangs([_pod(0, [])], Owners(podgroups={(NS, "pg"): _group()})).gangs[0].group_refusal is None
