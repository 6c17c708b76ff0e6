"""A gang whose size is only its own pods' word holds GPUs for the pods that exist plus what its namespace's quota
on GPUs still allows (``gputopo.control.phantoms``), and the pass leaves such a gang Pending, unplanned."""

from __future__ import annotations

from typing import Any

import pytest
from control_builders import at, cluster
from pass_builders import CONFIG, member_body, planner

from gputopo.control.facts import JobKey
from gputopo.control.gangpass import GangInput
from gputopo.control.phantoms import QuotaRoom, phantom_wait, quota_room, quota_room_of
from gputopo.control.reconcile import PassInput, PassRules, run_pass
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member, OwnerRef
from gputopo.placement import place

BARE = GangId("team", "gputopo", "big")
JOB = OwnerRef("batch/v1", "Job", "big", "job-uid")


def member(rank: int, *, phase: str = "Pending") -> Member:
    return Member(f"big-{rank}", f"uid-{rank}", rank, 8, (GATE,), None, phase=phase, created=at(0))


def gang(size: int, ranks: tuple[int, ...], owner: OwnerRef | None = None, shape: int = 8) -> Gang:
    return Gang(BARE, Declared(size, (shape,) * size), tuple(member(r) for r in ranks), owner=owner)


@pytest.mark.parametrize(
    ("subject", "room", "headroom", "said"),
    [
        (gang(4, (0, 1, 2, 3)), {}, 0, None),
        (gang(8192, (0,)), {}, 0, "declares 8192 ranks, 1 exist; its namespace has no quota"),
        (gang(4, (0, 1)), {}, 2, None),
        (gang(4, (0,)), {}, 2, "declares 4 ranks, 1 exist"),
        (gang(4, (0,)), {}, None, None),
        (gang(4, (0,)), {"team": 24}, 0, None),
        (gang(4, (0,)), {"team": 23}, 0, "declares 4 ranks, 1 exist; namespace quota allows 23 more GPUs"),
        (gang(4, (0,)), {"other": 100}, 0, "no quota on requests.nvidia.com/gpu"),
        (gang(4, (0,)), {"team": 0}, 99, "namespace quota allows 0 more GPUs, its ranks with no pod need 24"),
        (gang(8192, (0,), owner=JOB), {"team": 0}, 0, None),
        (Gang(BARE, None, (member(0),)), {"team": 0}, 0, None),
        (gang(4, (0, 1, 2, 3), shape=0), {"team": 0}, 0, None),
    ],
    ids=[
        "every-rank-exists",
        "one-pod-declares-8192-no-quota",
        "missing-within-headroom",
        "missing-past-headroom",
        "no-cap-without-quota",
        "quota-room-fits-the-missing-ranks",
        "quota-room-one-gpu-short",
        "another-namespaces-quota-is-not-room",
        "quota-wins-over-headroom",
        "owner-declares-the-size",
        "size-not-known",
        "ranks-without-gpus-are-not-waited-for",
    ],
)
def test_phantom_wait(subject: Gang, room: dict[str, int], headroom: int | None, said: str | None) -> None:
    found = phantom_wait(subject, room, headroom)
    if said is None:
        assert found is None
    else:
        assert found is not None and said in found


def quota(namespace: str | None, hard: Any, used: Any, *, key: str = "requests.nvidia.com/gpu") -> dict[str, Any]:
    meta = {"name": "q"} | ({"namespace": namespace} if namespace is not None else {})
    status: dict[str, Any] = {"hard": {key: hard}}
    if used is not None:
        status["used"] = {key: used}
    return {"metadata": meta, "spec": {"hard": {key: hard}}, "status": status}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (quota("team", "16", "4"), QuotaRoom("team", 12)),
        (quota("team", "16", "20"), QuotaRoom("team", 0)),
        (quota("team", "16", None), QuotaRoom("team", 0)),
        (quota("team", "1" * 5000, "0"), QuotaRoom("team", 0)),
        (quota("team", "16", "4", key="requests.cpu"), QuotaRoom("team", None)),
        (quota(None, "16", "4"), None),
        ({"metadata": {"namespace": "team"}, "status": "garbage"}, QuotaRoom("team", None)),
    ],
    ids=["hard-minus-used", "over-used", "use-not-counted-yet", "huge-number", "no-gpu-key", "no-namespace", "garbage"],
)
def test_quota_room_of(obj: dict[str, Any], expected: QuotaRoom | None) -> None:
    assert quota_room_of(obj) == expected


def test_a_namespaces_room_is_the_least_of_its_gpu_quotas() -> None:
    quotas = [QuotaRoom("team", 12), QuotaRoom("team", 5), QuotaRoom("team", None), QuotaRoom("open", None)]
    assert quota_room(quotas) == {"team": 5}


def test_a_pass_leaves_a_bare_gang_past_its_quota_pending_and_plans_it_once_the_quota_allows() -> None:
    subject = gang(4, (0,))
    key = JobKey(BARE.key)
    bodies = {m.uid: member_body(m) for m in subject.members}
    view = cluster().node("n0").node("n1").node("n2").node("n3").view()

    def run(room: dict[str, int]) -> dict[str, Any]:
        given = GangInput({key: subject}, {}, bodies, planner, quota_room=room, headroom=0)
        result = run_pass(PassInput({}, {}, view, at(10), gangs=given), PassRules(CONFIG, place))
        found = next(a for a in result.gang_actions if a.key == key)
        assert found.status is not None
        return found.status

    held = run({"team": 8})
    assert held["phase"] == "Pending" and not held.get("ranks")
    assert "declares 4 ranks, 1 exist; namespace quota allows 8 more GPUs" in held["message"]
    assert run({"team": 24})["phase"] == "Planned"
