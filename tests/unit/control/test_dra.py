"""DRA mode on plain data: the devices NVIDIA's driver publishes, the claims that pin a rank's planned GPUs,
the GPUs other claims hold, and what happens when a planned device cannot be had."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from control_builders import at, cluster, job, pod

from gputopo.api.group import GPU_RESOURCE
from gputopo.api.trainingjob import JobPhase, PlacementStatus, TrainingJobStatus, WorkerPlacement
from gputopo.control.dra import (
    ClaimFacts,
    DeviceRef,
    DraView,
    GpuAllocation,
    SliceFacts,
    claim_facts,
    slice_facts,
    uuid_selector,
)
from gputopo.control.facts import JobFacts, JobKey, PodFacts
from gputopo.control.ledger import Ledger, PlannedGang
from gputopo.control.lifecycle import Config
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView, used_gpus
from gputopo.placement import DEFAULT_TIERS, place
from gputopo.topology.model import Topology

DRA = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30, gpu_allocation=GpuAllocation.DRA)
PLUGIN = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30)


def uuid_of(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu:04d}"


def slice_body(node: str, gpus: int, *, tainted: tuple[int, ...] = (), absent: tuple[int, ...] = ()) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver writes it: pool = node, one device gpu-<minor> per GPU."""
    devices = []
    for i in range(gpus):
        if i in absent:
            continue
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": uuid_of(node, i)},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "resource.kubernetes.io/pciBusID": {"string": f"0000:{i + 0x18:02x}:00.0"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if i in tainted:
            device["taints"] = [{"key": "gpu.nvidia.com/unhealthy", "value": "XID79", "effect": "NoSchedule"}]
        devices.append(device)
    return {
        "metadata": {"name": f"{node}-gpu.nvidia.com-abcde"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim_body(
    name: str,
    node: str,
    gpus: list[int],
    *,
    namespace: str = "other",
    owner: JobFacts | None = None,
    rank: int = 0,
    generation: int = 1,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"claim-{name}"}
    if owner is not None:
        meta["labels"] = {"gputopo.io/job": owner.name, "gputopo.io/rank": str(rank)}
        meta["annotations"] = {"gputopo.io/placement-generation": str(generation)}
        meta["ownerReferences"] = [{"kind": "TrainingJob", "name": owner.name, "uid": owner.uid}]
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{g}"} for g in gpus]
    return {
        "metadata": meta,
        "status": {"allocation": {"devices": {"results": results}}} if gpus else {},
    }


def with_uuids(view: ClusterView) -> ClusterView:
    """The catalog's node types carry no UUIDs; the probe reports them, so give every GPU one."""
    topologies = {}
    for name, facts in view.topologies.items():
        t = facts.topology
        assert t is not None
        gpus = tuple(replace(g, uuid=uuid_of(name, g.index)) for g in t.gpus)
        topologies[name] = replace(facts, topology=Topology(gpus, t.links, t.nics, t.system))
    return replace(view, topologies=topologies)


def dra_view(view: ClusterView, claims: Sequence[dict[str, Any]] = (), **slice_options: Any) -> ClusterView:
    view = with_uuids(view)
    slices = {}
    for name in view.topologies:
        parsed = slice_facts(slice_body(name, 8, **slice_options))
        slices[parsed.name] = parsed
    parsed_claims = {(c.namespace, c.name): c for c in map(claim_facts, claims)}
    return replace(view, dra=DraView(slices, parsed_claims))


def run(
    jobs: list[JobFacts], view: ClusterView, pods: Sequence[PodFacts] = (), now: float = 10.0, config: Config = DRA
) -> PassResult:
    by_job: dict[JobKey, list[PodFacts]] = {}
    for p in pods:
        by_job.setdefault(JobKey((p.namespace, str(p.job))), []).append(p)
    return run_pass(PassInput({j.key: j for j in jobs}, by_job, view, at(now)), PassRules(config, place))


def placed(node: str, gpus: list[int], generation: int = 1) -> PlacementStatus:
    return PlacementStatus(
        generation=generation,
        estimatedBusBandwidthGBps=400.0,
        bottleneck="test",
        workers=[WorkerPlacement(rank=0, node=node, gpus=gpus)],
    )


# -- reading the driver's objects -------------------------------------------------------------------------------


def one_device(attributes: dict[str, Any]) -> dict[str, Any]:
    spec = {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"}}
    return {"spec": {**spec, "devices": [{"name": "gpu-3", "attributes": attributes}]}}


SLICES = [
    ("nvidia-shaped", slice_body("n1", 2), [("gpu-0", uuid_of("n1", 0), False), ("gpu-1", uuid_of("n1", 1), False)]),
    ("tainted-device", slice_body("n1", 2, tainted=(1,)), [("gpu-0", uuid_of("n1", 0), False),
                                                           ("gpu-1", uuid_of("n1", 1), True)]),
    ("domain-qualified-uuid", one_device({"gpu.nvidia.com/uuid": {"string": "GPU-x"}}), [("gpu-3", "GPU-x", False)]),
    ("uuid-not-a-string", one_device({"uuid": {"int": 7}}), [("gpu-3", "", False)]),
    ("odd-body", {"spec": {"devices": "none", "pool": []}}, []),
    ("empty", {}, []),
]  # fmt: skip


@pytest.mark.parametrize(("case", "body", "expected"), SLICES, ids=[c[0] for c in SLICES])
def test_slices_are_read_as_nvidias_driver_writes_them(
    case: str, body: dict[str, Any], expected: list[tuple[str, str, bool]]
) -> None:
    facts = slice_facts(body)
    assert [(d.ref.device, d.uuid, d.tainted) for d in facts.devices] == expected, case


def test_a_claim_is_read_with_its_allocation_and_owner() -> None:
    j = job("llm")
    facts = claim_facts(claim_body("llm-0-g3", "n1", [2, 3], namespace="default", owner=j, generation=3))
    assert facts.allocated == (DeviceRef("gpu.nvidia.com", "n1", "gpu-2"), DeviceRef("gpu.nvidia.com", "n1", "gpu-3"))
    assert (facts.job, facts.rank, facts.generation, facts.owner_uid) == ("llm", 0, 3, j.uid)
    assert claim_facts({"metadata": "odd", "status": {"allocation": []}}) == ClaimFacts("default", "")


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = SliceFacts("old", "gpu.nvidia.com", "n1", 1, "n1", slice_facts(slice_body("n1", 2)).devices)
    new = replace(slice_facts(slice_body("n1", 1)), name="new", generation=2)
    assert [r.device for r in DraView({"old": old, "new": new}).devices()] == ["gpu-0"]


BAD_UUIDS = [
    ("quote", ['GPU-a", "GPU-b']),
    ("cel-expression", ["GPU-a] || true || ["]),
    ("empty-string", [""]),
    ("none-at-all", []),
]


@pytest.mark.parametrize(("case", "uuids"), BAD_UUIDS, ids=[c[0] for c in BAD_UUIDS])
def test_a_uuid_cel_could_misread_is_refused(case: str, uuids: list[str]) -> None:
    with pytest.raises(ValueError, match="cannot be pinned"):
        uuid_selector(uuids)


# -- the claims a placed gang gets ------------------------------------------------------------------------------


def test_in_dra_mode_each_rank_gets_a_claim_for_exactly_its_planned_gpus() -> None:
    j = job("llm", workers=2, gpus=4)
    view = dra_view(cluster().node("n1").node("n2").view())
    actions = next(a for a in run([j], view).actions if a.job == j.key)
    assert actions.status is not None and actions.status.placement is not None
    workers = actions.status.placement.workers
    assert [c["metadata"]["name"] for c in actions.claims] == ["llm-0-g1", "llm-1-g1"]
    for claim, worker, pod_body in zip(actions.claims, workers, actions.pods, strict=True):
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        assert request["deviceClassName"] == "gpu.nvidia.com"
        assert request["count"] == len(worker.gpus) == 4
        uuids = ", ".join(f'"{uuid_of(worker.node, g)}"' for g in worker.gpus)
        expression = f'device.attributes["gpu.nvidia.com"].uuid in [{uuids}]'
        assert request["selectors"] == [{"cel": {"expression": expression}}]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == j.uid
        # kube-scheduler's own finalizer, set at creation so that it does not update every claim to add it
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        spec = pod_body["spec"]
        assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
        container = spec["containers"][0]
        assert container["resources"]["claims"] == [{"name": "gpus"}]
        assert GPU_RESOURCE not in (container["resources"].get("limits") or {})


def test_a_gpu_limit_in_the_template_is_dropped_in_dra_mode() -> None:
    j = job("llm", gpus=2, template={"spec": {"containers": [{"name": "t", "image": "x", "resources": {
        "limits": {GPU_RESOURCE: 2, "cpu": "4"}, "requests": {GPU_RESOURCE: 2}}}]}})  # fmt: skip
    actions = next(a for a in run([j], dra_view(cluster().node("n1").view())).actions if a.job == j.key)
    resources = actions.pods[0]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "4"} and resources["requests"] == {}


def test_device_plugin_mode_creates_no_claims() -> None:
    j = job("llm", gpus=4)
    actions = next(a for a in run([j], cluster().node("n1").view(), config=PLUGIN).actions if a.job == j.key)
    assert actions.claims == []
    assert actions.pods[0]["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "4"
    assert "resourceClaims" not in actions.pods[0]["spec"]


# -- the GPUs claims hold ---------------------------------------------------------------------------------------

USED = [
    ("another-workloads-claim", {"claims": [claim_body("infer", "n1", [0, 1, 2])]}, {0, 1, 2}),
    ("tainted-device", {"tainted": (5,)}, {5}),
    ("device-withdrawn", {"absent": (7,)}, {7}),
    ("unallocated-claim", {"claims": [claim_body("waiting", "n1", [])]}, set()),
]  # fmt: skip


@pytest.mark.parametrize(("case", "options", "expected"), USED, ids=[c[0] for c in USED])
def test_gpus_kube_scheduler_cannot_allocate_count_as_used(
    case: str, options: dict[str, Any], expected: set[int]
) -> None:
    view = dra_view(cluster().node("n1").view(), **options)
    assert set(used_gpus(view, []).get("n1", frozenset())) == expected, case


def test_a_node_without_the_driver_offers_no_gpus_in_dra_mode() -> None:
    view = replace(with_uuids(cluster().node("n1").view()), dra=DraView())
    assert used_gpus(view, [])["n1"] == frozenset(range(8))


def test_a_job_is_planned_around_gpus_another_workloads_claim_holds() -> None:
    view = dra_view(cluster().node("n1").view(), claims=[claim_body("infer", "n1", [0, 1, 2, 3])])
    actions = next(a for a in run([job("llm", gpus=4)], view).actions)
    assert actions.status is not None and actions.status.placement is not None
    assert set(actions.status.placement.workers[0].gpus) == {4, 5, 6, 7}


# -- claims follow the gang -------------------------------------------------------------------------------------


def test_re_placement_deletes_the_old_generations_claims_and_keeps_the_current_ones() -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed("n1", [4, 5, 6, 7], 2)))
    claims = [
        claim_body("llm-0-g1", "n1", [0, 1, 2, 3], namespace="default", owner=j, generation=1),
        claim_body("llm-0-g2", "n1", [], namespace="default", owner=j, generation=2),
    ]
    view = dra_view(cluster().node("n1").view(), claims=claims)
    pods = [pod(j, 0, gpus=(4, 5, 6, 7), generation=2)]
    actions = next(a for a in run([j], view, pods).actions if a.job == j.key)
    assert actions.claim_deletions == ["llm-0-g1"]


def test_a_finished_job_gives_its_claims_back() -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.SUCCEEDED, placement=placed("n1", [0, 1, 2, 3])))
    view = dra_view(
        cluster().node("n1").view(),
        claims=[claim_body("llm-0-g1", "n1", [0, 1, 2, 3], namespace="default", owner=j)],
    )
    actions = next(a for a in run([j], view).actions if a.job == j.key)
    assert actions.claim_deletions == ["llm-0-g1"]


def test_claims_of_an_earlier_job_of_the_same_name_are_deleted() -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed("n1", [0, 1, 2, 3])))
    earlier = replace(j, uid="uid-earlier")
    view = dra_view(
        cluster().node("n1").view(),
        claims=[claim_body("llm-0-g1", "n1", [], namespace="default", owner=earlier)],
    )
    actions = next(a for a in run([j], view).actions if a.job == j.key)
    assert actions.claim_deletions == ["llm-0-g1"]


BLOCKED = [
    ("taken-by-another-claim", {"claims": [claim_body("infer", "n1", [2])]}, "allocated to ResourceClaim other/infer"),
    ("device-tainted", {"tainted": (1,)}, "is tainted in its ResourceSlice"),
    ("device-withdrawn", {"absent": (3,)}, "is not published by the DRA driver"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "options", "message"), BLOCKED, ids=[c[0] for c in BLOCKED])
def test_a_planned_device_that_cannot_be_allocated_sends_the_job_back_to_planning(
    case: str, options: dict[str, Any], message: str
) -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed("n1", [0, 1, 2, 3])))
    own = claim_body("llm-0-g1", "n1", [], namespace="default", owner=j)
    options = {**options, "claims": [*options.get("claims", []), own]}
    view = dra_view(cluster().node("n1").view(), **options)
    actions = next(a for a in run([j], view, [pod(j, 0, gpus=(0, 1, 2, 3))]).actions if a.job == j.key)
    assert actions.status is not None
    placed_condition = next(c for c in actions.status.conditions if c.type == "Placed")
    assert (placed_condition.status, placed_condition.reason) == ("False", "ClaimUnallocatable"), case
    assert message in placed_condition.message
    assert [d.name for d in actions.deletions] == ["llm-0"]
    assert actions.claim_deletions == ["llm-0-g1"]
    assert actions.status.restarts == 0
    # The next pass plans it again, on devices that can be had, while the old pod terminates.
    again = replace(j, status=actions.status)
    terminating = [pod(j, 0, gpus=(0, 1, 2, 3), deleting=True)]
    replanned = next(a for a in run([again], view, terminating, now=11.0).actions if a.job == j.key)
    assert replanned.status is not None and replanned.status.placement is not None
    assert replanned.status.placement.generation == 2
    assert not set(replanned.status.placement.workers[0].gpus) & {1, 2, 3}


def test_a_device_its_own_old_claim_still_holds_is_waited_for() -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed("n1", [0, 1, 2, 3], 2)))
    claims = [
        replace_deleting(claim_body("llm-0-g1", "n1", [0, 1, 2, 3], namespace="default", owner=j, generation=1)),
        claim_body("llm-0-g2", "n1", [], namespace="default", owner=j, generation=2),
    ]
    view = dra_view(cluster().node("n1").view(), claims=claims)
    actions = next(a for a in run([j], view, [pod(j, 0, gpus=(0, 1, 2, 3), generation=2)]).actions if a.job == j.key)
    assert actions.deletions == [] and actions.claim_deletions == []
    assert actions.status is None or actions.status.placement == j.status.placement


def test_an_allocated_claim_is_not_second_guessed() -> None:
    j = job("llm", gpus=4, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placed("n1", [0, 1, 2, 3])))
    view = dra_view(
        cluster().node("n1").view(),
        claims=[claim_body("llm-0-g1", "n1", [0, 1, 2, 3], namespace="default", owner=j)],
        tainted=(0,),
    )
    result = run([j], view, [pod(j, 0, gpus=(0, 1, 2, 3))])
    assert all(a.deletions == [] for a in result.actions)


def replace_deleting(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    return body


def test_a_plan_sent_back_leaves_the_ledger_even_when_its_gang_never_appeared_whole() -> None:
    workers = [WorkerPlacement(rank=r, node=n, gpus=list(range(8))) for r, n in enumerate(("n1", "n2"))]
    placement = PlacementStatus(generation=1, estimatedBusBandwidthGBps=1.0, bottleneck="test", workers=workers)
    j = job("llm", workers=2, gpus=8, status=TrainingJobStatus(phase=JobPhase.PLACING, placement=placement))
    ledger = Ledger()
    ledger.reserve(PlannedGang(j.key, 1, tuple((w.node, tuple(w.gpus)) for w in workers)))
    view = dra_view(cluster().node("n1").node("n2").view(), claims=[claim_body("thief", "n2", [0])])
    # Only rank 0's pod could be created: the gang was never whole, so the pods never made the plan visible.
    result = run_pass(PassInput({j.key: j}, {j.key: [pod(j, 0)]}, view, at(10), list(ledger)), PassRules(DRA, place))
    ledger.prune(result.visible)
    assert j.key not in ledger
