"""The gang writer over a recording client: the order of the writes, what stops them, and what it says; a record's
exact deletion; and the runtime's gang side, whose gang is busy only until its writes are through, and whose records
read take what only the object knows (uid, resourceVersion, owner) from the watch."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gputopo.control.facts import JobKey
from gputopo.control.gangactions import ClaimAllocation, Eviction, GangActions, Involved, PodPatch, RecordDeletion
from gputopo.control.gangrecords import record_facts
from gputopo.controller.gangside import GangSide, left_by
from gputopo.controller.gangwatches import GangWatches
from gputopo.controller.gangwriter import GangWritten, write_gang
from gputopo.controller.gate import PriorityGate
from gputopo.controller.writer import Priority
from gputopo.kube.client import DeletionOutcome, EvictionOutcome, InvolvedObject, KubeClient
from gputopo.kube.errors import ApiError
from gputopo.placement import place
from gputopo.placement.types import GpuChoice, TierConfig

OWNER = Involved("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "s-1")
STEER = ({"op": "remove", "path": "/spec/schedulingGates/0"},)


class RecordingClient:
    """Records each call; ``evictions`` and ``patches`` say what each pod's call answers (an exception is
    raised)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.evictions: dict[str, EvictionOutcome | Exception] = {}
        self.patches: dict[str, bool | Exception] = {}
        self.claims: dict[str, bool | Exception] = {}  # a claim's status patch answers this
        self.deletion: DeletionOutcome | Exception = "deleted"
        self.fail: dict[str, Exception] = {}

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            raise self.fail[what]

    async def create_gang_placement(self, body: dict[str, Any]) -> bool:
        self.calls.append(("create", body["metadata"]["namespace"], body["metadata"]["name"], body.get("spec")))
        self._maybe_fail("create")
        return True

    async def write_gang_placement_status(self, namespace: str, name: str, status: dict[str, Any]) -> str:
        self.calls.append(("status", namespace, name, status))
        self._maybe_fail("status")
        return "2"

    async def delete_gang_placement(
        self, namespace: str, name: str, *, uid: str | None = None, resource_version: str | None = None
    ) -> DeletionOutcome:
        self.calls.append(("delete", namespace, name, uid, resource_version))
        if isinstance(self.deletion, Exception):
            raise self.deletion
        return self.deletion

    async def evict_pod(
        self, namespace: str, name: str, grace_seconds: int | None, *, uid: str | None = None
    ) -> EvictionOutcome:
        self.calls.append(("evict", name, grace_seconds, uid))
        outcome = self.evictions.get(name, "evicted")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def patch_pod_json(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> bool:
        self.calls.append(("patch", name, ops))
        outcome = self.patches.get(name, True)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def patch_claim_json(
        self, namespace: str, name: str, ops: list[dict[str, Any]], *, status: bool = False
    ) -> bool:
        self.calls.append(("claim-status" if status else "claim", name, ops))
        outcome = self.claims.get(name, True) if status else True
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def event_on(self, namespace: str, involved: InvolvedObject, type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", involved.kind, involved.name, reason))
        self._maybe_fail("event")


def actions(**kw: Any) -> GangActions:
    gang = GangActions(
        key=JobKey(("ml", "jobset/js")),
        namespace="ml",
        record_name="jobset-js",
        record={"metadata": {"labels": {"a": "b"}}, "spec": {"gang": "ml/jobset/js"}},
        status={"generation": 1, "nodes": ["n1"]},
        evictions=[Eviction("old-0", "u-old", 30)],
        patches=[PodPatch("js-w-0-0-x", "u-0", STEER), PodPatch("js-w-0-1-x", "", STEER)],
        placed=True,
    )
    gang.event(OWNER, "Normal", "Placed", "placed on n1")
    for name, value in kw.items():
        setattr(gang, name, value)
    return gang


def write(client: RecordingClient, gang: GangActions, gate: PriorityGate | None = None) -> GangWritten:
    return asyncio.run(write_gang(cast(KubeClient, client), gang, gate=gate))


def kinds(client: RecordingClient) -> list[str]:
    return [call[0] for call in client.calls]


@pytest.mark.parametrize("gated", [False, True], ids=["own concurrency", "the jobs' gate"])
def test_the_record_then_evictions_then_patches_then_events(gated: bool) -> None:
    client = RecordingClient()
    written = write(client, actions(), PriorityGate(1) if gated else None)
    assert written == GangWritten(status_written=True, patched=("js-w-0-0-x", "js-w-0-1-x"), evicted=("old-0",))
    assert kinds(client) == ["create", "status", "evict", "patch", "patch", "event"]
    assert client.calls[0] == ("create", "ml", "jobset-js", {"gang": "ml/jobset/js"})
    assert client.calls[2] == ("evict", "old-0", 30, "u-old")
    assert client.calls[-1] == ("event", "JobSet", "js", "Placed")


def test_a_patch_first_tests_the_pods_uid() -> None:
    client = RecordingClient()
    write(client, actions())
    patches = {call[1]: call[2] for call in client.calls if call[0] == "patch"}
    assert patches["js-w-0-0-x"] == [{"op": "test", "path": "/metadata/uid", "value": "u-0"}, *STEER]
    assert patches["js-w-0-1-x"] == list(STEER)  # no uid known: the ops as they are


def test_only_what_is_asked_is_done() -> None:
    client = RecordingClient()
    written = write(client, actions(record=None, status=None, evictions=[], events=[]))
    assert kinds(client) == ["patch", "patch"]
    assert not written.status_written and written.patched == ("js-w-0-0-x", "js-w-0-1-x")


@pytest.mark.parametrize("step", ["create", "status"])
def test_a_record_that_cannot_be_written_stops_everything(step: str) -> None:
    client = RecordingClient()
    client.fail[step] = ApiError("status of GangPlacement ml/jobset-js: 404 NotFound", 404, "NotFound")
    written = write(client, actions())
    assert written.error is not None and "404" in written.error
    assert not written.status_written and written.patched == ()
    assert "evict" not in kinds(client) and "patch" not in kinds(client) and "event" not in kinds(client)


def test_an_eviction_a_budget_blocks_stops_the_patches() -> None:
    client = RecordingClient()
    client.evictions = {"old-1": "blocked", "old-2": "gone"}
    gang = actions(evictions=[Eviction("old-0", "u"), Eviction("old-1", "u"), Eviction("old-2", "u")])
    written = write(client, gang)
    assert written.evicted == ("old-0", "old-2") and written.eviction_blocked == ("old-1",)
    assert written.error is None and written.status_written
    assert "patch" not in kinds(client) and "event" not in kinds(client)


def test_an_eviction_that_fails_stops_the_patches_and_says_why() -> None:
    client = RecordingClient()
    client.evictions = {"old-0": ApiError("evict Pod ml/old-0: 500 InternalError", 500)}
    written = write(client, actions())
    assert written.error == "evict Pod ml/old-0: 500 InternalError"
    assert "patch" not in kinds(client)


def test_refused_patches_are_outcomes_and_an_api_error_is_said() -> None:
    client = RecordingClient()
    client.patches = {"js-w-0-1-x": False}
    written = write(client, actions())
    assert written.patched == ("js-w-0-0-x",) and written.patch_failed == ("js-w-0-1-x",)
    assert written.error is None and "event" in kinds(client)

    client = RecordingClient()
    client.patches = {"js-w-0-1-x": ApiError("patch Pod ml/js-w-0-1-x: 403 Forbidden", 403, "Forbidden")}
    written = write(client, actions())
    assert written.patched == ("js-w-0-0-x",) and written.error is not None and "403" in written.error


def test_an_event_that_cannot_be_posted_is_only_logged() -> None:
    client = RecordingClient()
    client.fail["event"] = ApiError("event: 403 Forbidden", 403)
    written = write(client, actions())
    assert written.error is None and written.patched == ("js-w-0-0-x", "js-w-0-1-x")


ALLOCATION = {"devices": {"results": []}}


def claim(name: str, pod: str, **kw: Any) -> ClaimAllocation:
    return ClaimAllocation(name, f"uid-{name}", pod, ALLOCATION, **kw)


def test_claims_are_allocated_after_the_evictions_and_before_their_pods_are_let_go() -> None:
    client = RecordingClient()
    gang = actions(claims=[claim("c0", "js-w-0-0-x", finalizers=()), claim("c1", "js-w-0-1-x")])
    written = write(client, gang)
    assert kinds(client) == [
        "create",
        "status",
        "evict",
        "claim",
        "claim-status",
        "claim-status",
        "patch",
        "patch",
        "event",
    ]
    assert written.allocated == ("c0", "c1") and written.patched == ("js-w-0-0-x", "js-w-0-1-x")
    statuses = [call[2] for call in client.calls if call[0] == "claim-status"]
    assert statuses[0][-1] == {"op": "add", "path": "/status/allocation", "value": ALLOCATION}


@pytest.mark.parametrize(
    "outcome",
    [False, ApiError("patch ResourceClaim ml/c1 status: 403 Forbidden", 403, "Forbidden")],
    ids=["changed", "refused"],
)
def test_a_pod_whose_claim_was_not_written_stays_gated(outcome: bool | Exception) -> None:
    client = RecordingClient()
    client.claims = {"c1": outcome}
    written = write(client, actions(claims=[claim("c0", "js-w-0-0-x"), claim("c1", "js-w-0-1-x")]))
    assert [call[1] for call in client.calls if call[0] == "patch"] == ["js-w-0-0-x"]
    assert written.allocated == ("c0",) and "js-w-0-1-x" in written.patch_failed
    assert (written.error is not None) == isinstance(outcome, Exception)


@pytest.mark.parametrize("stopped", [False, True], ids=["through", "stopped by an error"])
def test_what_became_of_the_writes_is_told_before_the_events_go_out(stopped: bool) -> None:
    client = RecordingClient()
    if stopped:
        client.fail["status"] = ApiError("status: 500", 500)
    told: list[tuple[GangWritten, int]] = []
    gang = actions()
    written = asyncio.run(
        write_gang(
            cast(KubeClient, client),
            gang,
            written_before_events=lambda w: told.append((w, len(client.calls))),
        )
    )
    assert told == [(written, len(client.calls) - (0 if stopped else 1))]  # the one Event came after
    assert ("event" in kinds(client)) is not stopped


class SlowEvents(RecordingClient):
    """Events wait until ``posting`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.posting = asyncio.Event()

    async def event_on(self, namespace: str, involved: InvolvedObject, type_: str, reason: str, message: str) -> None:
        await self.posting.wait()
        await super().event_on(namespace, involved, type_, reason, message)


def test_a_gang_is_busy_until_its_writes_are_through_not_until_its_events_are_posted() -> None:
    async def scenario() -> dict[str, Any]:
        client = SlowEvents()
        pokes: list[int] = []
        side = GangSide(cast(KubeClient, client), lambda: pokes.append(1), 300.0)
        gang = actions()
        side.start(gang, None)
        busy_at_start = set(side.busy())
        for _ in range(100):
            if not side.busy():
                break
            await asyncio.sleep(0)
        seen = {"busy at start": busy_at_start, "busy after writes": set(side.busy()), "pokes": len(pokes)}
        seen["events going out"] = len(side.events)
        client.posting.set()
        for _ in range(100):
            if not side.events:
                break
            await asyncio.sleep(0)
        seen["events left"] = len(side.events)
        seen["calls"] = [c[0] for c in client.calls]
        seen["written"] = gang.key in side.written
        return seen

    seen = asyncio.run(scenario())
    assert seen["busy at start"] == {actions().key}
    assert seen["busy after writes"] == set() and seen["pokes"] == 1  # the next pass may step it at once
    assert seen["events going out"] == 1 and seen["events left"] == 0
    assert seen["calls"] == ["create", "status", "evict", "patch", "patch", "event"]
    assert seen["written"]  # the record its writes left outranks the watch's until the watch shows it


def test_a_gangs_new_plan_counts_while_it_goes_out_and_its_end_is_urgent_only_while_members_may_wait() -> None:
    async def scenario() -> list[tuple[str, int, list[str]]]:
        heard: list[str] = []
        client = RecordingClient()
        side = GangSide(
            cast(KubeClient, client),
            lambda: heard.append("now"),
            300.0,
            poke_soon=lambda: heard.append("soon"),
        )
        seen = []
        whole = {"generation": 1, "nodes": ["n1"]}
        short = {**whole, "missingRanks": [2]}
        report = actions(record=None, evictions=[], patches=[], events=[], placed=False)
        cases = [
            ("placed, a rank missing", actions(events=[], status=short)),
            ("placed whole", actions(events=[])),
            ("placed whole, a patch refused", actions(events=[])),
            ("report", report),
        ]
        for name, gang in cases:
            client.patches = {"js-w-0-1-x": False} if "refused" in name else {}
            side.start(gang, None)
            counted = side.placing
            while side.busy():
                await asyncio.sleep(0)
            seen.append((name, counted, list(heard)))
            heard.clear()
        assert side.placing == 0
        return seen

    assert asyncio.run(scenario()) == [
        ("placed, a rank missing", 1, ["now"]),  # its member may have come meanwhile
        ("placed whole", 1, ["soon"]),
        ("placed whole, a patch refused", 1, ["now"]),  # the pod changed: the next pass decides
        ("report", 0, ["soon"]),
    ]


def test_steering_later_members_into_a_held_plan_goes_before_other_gangs_updates() -> None:
    """Pods waiting to be steered are on the way to Running; a status that only reports is not."""

    async def scenario() -> list[str]:
        client = RecordingClient()
        gate = PriorityGate(1)
        await gate.acquire(Priority.UPDATE)  # the one slot is taken: both writes below wait for it
        report = actions(record=None, evictions=[], patches=[], events=[], placed=False)
        steer = actions(record=None, status=None, evictions=[], events=[], placed=False)
        steer.patches = [PodPatch("js-w-0-1-x", "", STEER)]
        first = asyncio.create_task(write_gang(cast(KubeClient, client), report, gate=gate))
        await asyncio.sleep(0)
        second = asyncio.create_task(write_gang(cast(KubeClient, client), steer, gate=gate))
        await asyncio.sleep(0)
        gate.release(Priority.UPDATE)
        await asyncio.gather(first, second)
        return kinds(client)

    assert asyncio.run(scenario()) == ["patch", "status"]


def deletion(rv: str = "41") -> GangActions:
    return GangActions(JobKey(("ml", "gputopo/bare")), "ml", "gputopo-bare", deletion=RecordDeletion("rec-uid", rv))


@pytest.mark.parametrize("outcome", ["deleted", "gone", "changed"])
def test_a_record_is_deleted_alone_and_only_as_read_and_gone_or_changed_are_outcomes(outcome: DeletionOutcome) -> None:
    client = RecordingClient()
    client.deletion = outcome
    written = write(client, deletion())
    assert client.calls == [("delete", "ml", "gputopo-bare", "rec-uid", "41")]
    assert written == GangWritten(deleted=outcome)


def test_a_deletion_without_a_resource_version_still_names_the_uid_and_an_api_error_is_said() -> None:
    client = RecordingClient()
    client.deletion = ApiError("delete GangPlacement ml/gputopo-bare: 403 Forbidden", 403, "Forbidden")
    written = write(client, deletion(rv=""))
    assert client.calls == [("delete", "ml", "gputopo-bare", "rec-uid", None)]
    assert written.deleted is None and written.error is not None and "403" in written.error


def test_a_deleted_record_is_forgotten_so_one_made_again_under_its_name_is_read_as_it_is() -> None:
    async def scenario() -> bool:
        side = GangSide(cast(KubeClient, RecordingClient()), lambda: None, 300.0)
        gang = deletion()
        side.written[gang.key] = (record_facts(BARE) or pytest.fail("unreadable"), time.monotonic())
        side.start(gang, None)
        while side.busy():
            await asyncio.sleep(0)
        return gang.key in side.written

    assert asyncio.run(scenario()) is False


BARE = {
    "metadata": {"name": "gputopo-bare", "namespace": "ml", "uid": "rec-uid", "resourceVersion": "41"},
    "spec": {"source": "gputopo", "gang": "bare"},
    "status": {"phase": "Running", "generation": 1},
}


def read_records(side: GangSide, *bodies: dict[str, Any]) -> dict[JobKey, Any]:
    placements = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in bodies}
    kinds = ("pods", "pod_groups", "jobs", "job_sets", "leader_worker_sets", "pytorch_jobs")
    watches = SimpleNamespace(gang_placements=placements, **{k: {} for k in kinds})
    given = side.read(cast(GangWatches, watches), TierConfig(()), place, GpuChoice.PLANNED)
    return dict(given.records)


@pytest.mark.parametrize("owned", [False, True])
def test_the_record_a_gangs_writes_left_takes_the_uid_version_and_owner_the_watch_shows(owned: bool) -> None:
    side = GangSide(cast(KubeClient, RecordingClient()), lambda: None, 300.0)
    watched = {**BARE, "metadata": {**BARE["metadata"]}}
    if owned:
        watched["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x-1"}]
    stamp = "2026-01-01T00:10:00+00:00"
    released = {"phase": "Released", "generation": 1, "podsGoneAt": stamp}
    mine = left_by(GangActions(JobKey(("ml", "gputopo/bare")), "ml", "gputopo-bare", status=released))
    assert mine is not None and mine.uid == "" and not mine.owned
    side.written[mine.key] = (mine, time.monotonic())
    record = read_records(side, watched)[mine.key]
    assert record.phase == "Released" and record.pods_gone_at is not None  # the writes' record, not yet shown
    assert (record.uid, record.resource_version, record.owned) == ("rec-uid", "41", owned)
    # the watch shows the phase but not the stamp yet: the writes' record still counts
    shown = {**watched, "status": {"phase": "Released", "generation": 1}}
    assert read_records(side, shown)[mine.key].pods_gone_at is not None
    # once it shows the stamp too, the watch's record is used
    side.written[mine.key] = (mine, time.monotonic())
    shown = {**watched, "status": released, "metadata": {**watched["metadata"], "resourceVersion": "42"}}
    assert read_records(side, shown)[mine.key].resource_version == "42" and mine.key not in side.written
