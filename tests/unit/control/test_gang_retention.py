"""The records of gangs whose pods are gone, in the control pass on plain data: a gang with no owner has its record
stamped when its last pod goes and deleted (exactly: its uid and resourceVersion) once the retention has passed, the
pass asking to look again when that is due; a pod back before then keeps the record; an owned gang's record is never
deleted by the operator. Every pass here is a fresh one: what it decides comes from the record alone, as after a
restart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from control_builders import at, cluster
from pass_builders import CONFIG, member_body, planner

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import GangActions, RecordDeletion
from gputopo.control.gangpass import GangInput
from gputopo.control.gangrecords import GangRecord, record_facts
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member
from gputopo.placement import place

GANG = GangId("team", "gputopo", "bare")
KEY = JobKey(GANG.key)
RETENTION = 600.0
GONE = 100.0  # when the pass first finds no pod left
OWNER_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "bare", "uid": "job-uid"}
RUNNING = {
    "phase": "Running",
    "generation": 1,
    "ranks": [{"rank": 0, "node": "n0", "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "pod": "bare-0"}],
}


def view() -> ClusterView:
    return cluster().node("n0").node("n1", leaf="leaf-a").view()


def record(status: dict[str, Any], *, owned: bool = False, meta: dict[str, Any] | None = None) -> GangRecord:
    """The record as the watch reads it: uid, resourceVersion, and ownerReferences when ``owned``."""
    metadata: dict[str, Any] = {"name": "gputopo-bare", "namespace": "team", "uid": "rec-uid", "resourceVersion": "41"}
    if owned:
        metadata["ownerReferences"] = [OWNER_REF]
    metadata.update(meta or {})
    found = record_facts({"metadata": metadata, "spec": {"source": "gputopo", "gang": "bare"}, "status": status})
    assert found is not None
    return found


def stamped(seconds: float, **status: Any) -> dict[str, Any]:
    """A released record's status, stamped as no pod of it left since ``seconds``."""
    return {"phase": "Released", "generation": 1, "podsGoneAt": at(seconds).isoformat(), **status}


def member(rank: int) -> Member:
    return Member(f"bare-{rank}", f"uid-{rank}", rank, 8, (GATE,), None, created=at(0))


def run(rec: GangRecord, now: float, pods: Sequence[Member] = (), retention: float = RETENTION) -> PassResult:
    """One pass at ``now`` over the record, with the gang's ``pods`` (none: no pod of it is left)."""
    gangs = {KEY: Gang(GANG, Declared(2, (8, 8)), tuple(pods), owner=None)} if pods else {}
    bodies = {m.uid: member_body(m) for m in pods}
    given = GangInput(gangs, {KEY: rec}, bodies, planner, record_retention=retention)
    return run_pass(PassInput({}, {}, view(), at(now), gangs=given), PassRules(CONFIG, place))


def actions(result: PassResult) -> GangActions | None:
    return next((a for a in result.gang_actions if a.key == KEY), None)


def test_an_ownerless_gangs_record_is_released_and_stamped_when_its_last_pod_goes() -> None:
    result = run(record(RUNNING), GONE)
    a = actions(result)
    assert a is not None and a.deletion is None
    assert a.status is not None and a.status["phase"] == "Released" and a.status["ranks"] == []
    assert a.status["podsGoneAt"] == at(GONE).isoformat()
    assert result.wake_at == at(GONE + RETENTION)


def test_before_the_retention_nothing_is_written_and_the_pass_wakes_when_it_is_due() -> None:
    result = run(record(stamped(GONE)), GONE + RETENTION - 1)
    assert actions(result) is None
    assert result.wake_at == at(GONE + RETENTION)


def test_a_record_of_an_ownerless_gang_is_deleted_once_the_retention_has_passed_counted_from_its_stamp() -> None:
    for now in (GONE + RETENTION, GONE + 10 * RETENTION):
        result = run(record(stamped(GONE)), now)
        a = actions(result)
        assert a is not None
        assert a.deletion == RecordDeletion("rec-uid", "41")  # exactly the record read
        assert a.status is None and not a.events and not a.patches
        assert result.wake_at is None


def test_a_record_whose_plan_is_still_held_when_the_retention_is_zero_is_deleted_holding_nothing() -> None:
    result = run(record(RUNNING), GONE, retention=0.0)
    a = actions(result)
    assert a is not None and a.deletion == RecordDeletion("rec-uid", "41")
    assert not result.gang_plans


@pytest.mark.parametrize(
    "meta",
    [{"ownerReferences": [OWNER_REF]}, {"ownerReferences": "garbage"}],
    ids=["ownerReferences", "ownerReferences that do not parse"],
)
def test_an_owned_gangs_record_is_never_deleted_by_the_operator(meta: dict[str, Any]) -> None:
    released = run(record(RUNNING, meta=meta), GONE)
    a = actions(released)
    assert a is not None and a.deletion is None
    assert a.status is not None and a.status["phase"] == "Released" and a.status["podsGoneAt"] is None
    assert released.wake_at is None
    for status in ({**RUNNING, "phase": "Released", "ranks": []}, stamped(GONE)):
        later = run(record(status, meta=meta), GONE + 10 * RETENTION)
        assert actions(later) is None and later.wake_at is None


def test_an_owned_gang_named_only_by_its_spec_is_never_deleted_either() -> None:
    rec = record(stamped(GONE))
    owned = record_facts(
        {
            "metadata": {"name": rec.name, "namespace": "team", "uid": "rec-uid", "resourceVersion": "41"},
            "spec": {"source": "gputopo", "gang": "bare", "owner": OWNER_REF},
            "status": stamped(GONE),
        }
    )
    assert owned is not None and owned.owned
    assert actions(run(owned, GONE + 10 * RETENTION)) is None


def test_a_pod_back_before_the_retention_keeps_the_record_and_clears_its_stamp() -> None:
    result = run(record(stamped(GONE)), GONE + RETENTION - 1, pods=[member(0)])
    a = actions(result)
    assert a is not None and a.deletion is None
    assert a.record is None  # the record is used again, not made anew
    assert a.status is not None and a.status["podsGoneAt"] is None
    assert a.status["generation"] == 2 and a.status["phase"] == "Planned"  # planned again, counting on
    # its pods gone again: the retention counts from then, not from the first time
    again = record({**a.status, "ranks": [], "phase": "Planned"})
    later = run(again, GONE + 2 * RETENTION)
    b = actions(later)
    assert b is not None and b.deletion is None and b.status is not None
    assert b.status["podsGoneAt"] == at(GONE + 2 * RETENTION).isoformat()
    assert later.wake_at == at(GONE + 3 * RETENTION)


def test_a_pod_of_the_gang_keeps_the_record_however_long_ago_it_was_stamped() -> None:
    result = run(record(stamped(GONE)), GONE + 10 * RETENTION, pods=[member(0)])
    a = actions(result)
    assert a is not None and a.deletion is None and a.status is not None and a.status["podsGoneAt"] is None


def test_a_record_not_read_back_has_no_uid_to_delete_by_and_is_kept() -> None:
    result = run(record(stamped(GONE), meta={"uid": None}), GONE + RETENTION)
    assert actions(result) is None and result.wake_at is None
