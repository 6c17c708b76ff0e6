"""A foreign gang in DRA mode, on plain data: its pods' own claims (made from their templates) are given the planned
devices before the pods are let go; a claim not made yet is waited for; one only kube-scheduler can allocate is
left to it on the planned node, and said so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC
from typing import Any

import pytest
from control_builders import at, cluster
from pass_builders import planner

from gputopo.control.dra import DEVICE_CLASS, DeviceRef, DraView, GpuAllocation, claim_facts, slice_facts
from gputopo.control.facts import JobKey
from gputopo.control.gangactions import ClaimAllocation, GangActions
from gputopo.control.gangdra import Pinned, Unpinned, Waiting, claim_patches, node_selector, pin_claims
from gputopo.control.gangpass import GangInput
from gputopo.control.gangrecords import record_facts
from gputopo.control.lifecycle import Config
from gputopo.control.reconcile import PassInput, PassResult, PassRules, run_pass
from gputopo.control.view import ClusterView
from gputopo.gangs.model import GATE, Declared, Gang, GangId, Member
from gputopo.placement import DEFAULT_TIERS, place
from gputopo.topology.model import Topology

DRA = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30, gpu_allocation=GpuAllocation.DRA)
PLUGIN = Config(DEFAULT_TIERS, unschedulable_timeout=60, not_ready_grace=30)
GANG = GangId("team", "gputopo", "dg")
KEY = JobKey(GANG.key)


# -- builders ---------------------------------------------------------------------------------------------------------


def uuid_of(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu:04d}"


def slice_body(node: str, gpus: int = 8) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver (and the sandbox's fake one) writes it: pool = node, gpu-<minor>."""
    devices = [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": uuid_of(node, i)}}} for i in range(gpus)]
    return {
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1},
            "devices": devices,
        },
    }


def pod_body(name: str, uid: str, claims: Sequence[str] = ("gpus",), gated: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team", "uid": uid},
        "spec": {
            "schedulingGates": [{"name": GATE}] if gated else [],
            "resourceClaims": [{"name": c, "resourceClaimTemplateName": f"tmpl-{c}"} for c in claims],
            "containers": [{"name": "w", "resources": {"claims": [{"name": c} for c in claims]}}],
        },
    }


def request(name: str = "gpus", count: int = 2, device_class: str = DEVICE_CLASS, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count, **extra}}


def made_claim(
    pod_uid: str,
    pod_claim: str = "gpus",
    requests: Sequence[dict[str, Any]] = (),
    *,
    name: str | None = None,
    allocated: Sequence[tuple[str, int]] = (),
    reserved: bool = False,
    finalizers: Sequence[str] = (),
    **devices: Any,
) -> dict[str, Any]:
    """A claim kube-controller-manager made from a pod's template: owned by the pod, annotated with its name."""
    name = name or f"{pod_uid}-{pod_claim}-x7k2p"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "uid": f"uid-{name}",
        "annotations": {"resource.kubernetes.io/pod-claim-name": pod_claim},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod_uid, "controller": True}],
    }
    if finalizers:
        meta["finalizers"] = list(finalizers)
    status: dict[str, Any] = {}
    if allocated:
        results = [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": n, "device": f"gpu-{g}"} for n, g in allocated
        ]
        status["allocation"] = {"devices": {"results": results}, "nodeSelector": node_selector(allocated[0][0])}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "someone", "uid": "u"}]
    spec = {"devices": {"requests": list(requests or [request()]), **devices}}
    return {"metadata": meta, "spec": spec, "status": status}


def dra(*claims: dict[str, Any], nodes: Sequence[str] = ("n0", "n1")) -> DraView:
    slices = {f"{n}-gpu.nvidia.com": slice_facts(slice_body(n)) for n in nodes}
    return DraView(slices, {(c.namespace, c.name): c for c in map(claim_facts, claims)})


UUIDS = {i: uuid_of("n1", i) for i in range(8)}


def pin(body: dict[str, Any], view: DraView, gpus: tuple[int, ...] = (2, 3)) -> Pinned | Waiting | Unpinned:
    return pin_claims(body, "n1", gpus, UUIDS, view, at(5))


# -- the pure decision ------------------------------------------------------------------------------------------------


def test_a_made_claim_is_given_the_planned_devices_of_the_planned_node() -> None:
    found = pin(pod_body("p0", "pod-0"), dra(made_claim("pod-0")))
    assert isinstance(found, Pinned) and len(found.writes) == 1
    write = found.writes[0]
    assert (write.name, write.uid, write.pod) == ("pod-0-gpus-x7k2p", "uid-pod-0-gpus-x7k2p", "p0")
    assert write.allocation == {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-2"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"},
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
        },
        # kube-scheduler would add it on reserving, and an allocation cannot change once set
        "allocationTimestamp": at(5).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert write.finalizers == () and not write.replace


def test_two_requests_and_two_claims_share_the_plan_in_order_and_the_claims_config_goes_along() -> None:
    config = [{"requests": ["a"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": "none"}}}]
    first = made_claim("pod-0", "one", [request("a", 1), request("b", 1)], config=config)
    second = made_claim("pod-0", "two", [request("c", 2)])
    found = pin(pod_body("p0", "pod-0", claims=("one", "two")), dra(first, second), gpus=(4, 5, 6, 7))
    assert isinstance(found, Pinned)
    by_claim = {w.name: w.allocation["devices"] for w in found.writes}
    results = {name: [(r["request"], r["device"]) for r in devices["results"]] for name, devices in by_claim.items()}
    assert results == {
        "pod-0-one-x7k2p": [("a", "gpu-4"), ("b", "gpu-5")],
        "pod-0-two-x7k2p": [("c", "gpu-6"), ("c", "gpu-7")],
    }
    assert by_claim["pod-0-one-x7k2p"]["config"] == [{"source": "FromClaim", **config[0]}]
    assert "config" not in by_claim["pod-0-two-x7k2p"]


@pytest.mark.parametrize(
    ("claims", "gpus", "expected", "words"),
    [
        ((), (2, 3), Waiting, "not made yet"),
        (
            (made_claim("pod-0", requests=[request(selectors=[{"cel": {"expression": "true"}}])]),),
            (2, 3),
            Unpinned,
            "CEL selectors",
        ),
        ((made_claim("pod-0", requests=[request(allocationMode="All")]),), (2, 3), Unpinned, "all devices"),
        (
            (made_claim("pod-0", requests=[{"name": "gpus", "firstAvailable": [{"name": "a"}]}]),),
            (2, 3),
            Unpinned,
            "subrequests",
        ),
        ((made_claim("pod-0", requests=[request(adminAccess=True)]),), (2, 3), Unpinned, "admin access"),
        (
            (made_claim("pod-0", requests=[request(), request("nic", 1, "nic.example.com")]),),
            (2, 3),
            Unpinned,
            "other classes",
        ),
        (
            (made_claim("pod-0", constraints=[{"requests": ["gpus"], "matchAttribute": "x.io/y"}]),),
            (2, 3),
            Unpinned,
            "constraints",
        ),
        ((made_claim("pod-0"),), (2, 3, 4), Unpinned, "ask for 2 GPUs, its plan has 3"),
        (
            (made_claim("pod-0"), made_claim("other", name="theirs", allocated=[("n1", 3)])),
            (2, 3),
            Waiting,
            "team/theirs",
        ),
        ((made_claim("pod-0", allocated=[("n0", 0), ("n0", 1)], reserved=True),), (2, 3), Waiting, "in use"),
    ],
    ids=[
        "claim-not-made-yet",
        "cel-selector",
        "all-devices",
        "subrequests",
        "admin-access",
        "other-device-class",
        "constraints",
        "count-differs-from-plan",
        "device-held-by-another-claim",
        "allocated-elsewhere-and-reserved",
    ],
)
def test_what_gputopo_cannot_allocate_is_waited_for_or_left_to_kube_scheduler(
    claims: tuple[dict[str, Any], ...], gpus: tuple[int, ...], expected: type, words: str
) -> None:
    found = pin(pod_body("p0", "pod-0"), dra(*claims), gpus)
    assert isinstance(found, expected), found
    assert words in found.reason  # type: ignore[union-attr]


def test_a_claim_already_given_the_plan_needs_no_write_and_an_earlier_plans_is_replaced() -> None:
    done = pin(pod_body("p0", "pod-0"), dra(made_claim("pod-0", allocated=[("n1", 2), ("n1", 3)])))
    assert done == Pinned(())
    stale = pin(pod_body("p0", "pod-0"), dra(made_claim("pod-0", allocated=[("n0", 0), ("n0", 1)])))
    assert isinstance(stale, Pinned) and stale.writes[0].replace


def test_a_claim_of_other_devices_only_is_left_to_kube_scheduler_and_the_gpu_claim_is_still_written() -> None:
    nic = made_claim(
        "pod-0", "nic", [request("nic", 1, "nic.example.com", selectors=[{"cel": {"expression": "true"}}])]
    )
    found = pin(pod_body("p0", "pod-0", claims=("gpus", "nic")), dra(made_claim("pod-0"), nic))
    assert isinstance(found, Pinned) and [w.name for w in found.writes] == ["pod-0-gpus-x7k2p"]


def test_a_pod_without_a_template_claim_is_left_to_kube_scheduler() -> None:
    body = pod_body("p0", "pod-0", claims=())
    assert isinstance(pin(body, dra()), Unpinned)


def test_the_patches_add_the_finalizer_clear_an_earlier_plan_then_write_the_allocation() -> None:
    write = ClaimAllocation("c", "uid-c", "p0", {"devices": {}}, finalizers=("other.io/keep",), replace=True)
    patches = claim_patches(write)
    guard = {"op": "test", "path": "/metadata/uid", "value": "uid-c"}
    absent_allocation = {"op": "test", "path": "/status/allocation", "value": None}  # none made meanwhile
    assert patches == [
        (
            False,
            [
                guard,
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.io/keep"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "resource.kubernetes.io/delete-protection"},
            ],
        ),
        (True, [guard, {"op": "remove", "path": "/status/allocation"}]),
        (True, [guard, absent_allocation, {"op": "add", "path": "/status/allocation", "value": {"devices": {}}}]),
    ]
    fresh = claim_patches(replace(write, finalizers=(), replace=False))
    assert fresh[0] == (
        False,
        [
            guard,
            {"op": "test", "path": "/metadata/finalizers", "value": None},  # none put there since it was read
            {"op": "add", "path": "/metadata/finalizers", "value": ["resource.kubernetes.io/delete-protection"]},
        ],
    )
    assert fresh[1] == (
        True,
        [guard, absent_allocation, {"op": "add", "path": "/status/allocation", "value": {"devices": {}}}],
    )
    protected = claim_patches(replace(write, finalizers=None, replace=False))
    assert [status for status, _ in protected] == [True]


def test_claim_facts_read_the_owning_pod_the_requests_and_the_finalizers() -> None:
    facts = claim_facts(made_claim("pod-0", requests=[request(count=3)], finalizers=["a.io/b"]))
    assert (facts.pod_uid, facts.pod_claim, facts.finalizers) == ("pod-0", "gpus", ("a.io/b",))
    assert [(r.name, r.device_class, r.count, r.unpinnable) for r in facts.requests] == [("gpus", DEVICE_CLASS, 3, "")]
    assert dra(made_claim("pod-0")).claims_of_pod("pod-0")[0].allocated == ()
    assert dra(made_claim("pod-0", allocated=[("n1", 1)])).holders() == {
        DeviceRef("gpu.nvidia.com", "n1", "gpu-1"): claim_facts(made_claim("pod-0", allocated=[("n1", 1)]))
    }


# -- in the pass -------------------------------------------------------------------------------------------------------


def member(rank: int) -> Member:
    return Member(f"dg-{rank}", f"pod-{rank}", rank, 2, (GATE,), created=at(0))


def view_with(*claims: dict[str, Any]) -> ClusterView:
    view = cluster().node("n0").node("n1").view()
    topologies = {}
    for name, facts in view.topologies.items():
        t = facts.topology
        assert t is not None
        gpus = tuple(replace(g, uuid=uuid_of(name, g.index)) for g in t.gpus)
        topologies[name] = replace(facts, topology=Topology(gpus, t.links, t.nics, t.system))
    return replace(view, topologies=topologies, dra=dra(*claims))


def run(view: ClusterView, config: Config = DRA, members: Sequence[Member] = (member(0), member(1))) -> GangActions:
    gang = Gang(GANG, Declared(2, (2, 2)), tuple(members))
    bodies = {m.uid: pod_body(m.pod, m.uid) for m in members}
    given = GangInput({KEY: gang}, {}, bodies, planner)
    result: PassResult = run_pass(PassInput({}, {}, view, at(10), gangs=given), PassRules(config, place))
    return next(a for a in result.gang_actions if a.key == KEY)


def test_in_dra_mode_each_pods_claim_gets_its_ranks_planned_devices_and_the_pod_goes_after() -> None:
    a = run(view_with(made_claim("pod-0"), made_claim("pod-1")))
    assert a.status is not None
    plan = {r["pod"]: r for r in a.status["ranks"]}
    assert sorted(c.pod for c in a.claims) == ["dg-0", "dg-1"] == sorted(p.name for p in a.patches)
    for write in a.claims:
        rank = plan[write.pod]
        results = write.allocation["devices"]["results"]
        assert [(r["pool"], r["device"]) for r in results] == [(rank["node"], f"gpu-{g}") for g in rank["gpus"]]


def test_a_pod_whose_claim_is_not_made_yet_stays_gated_and_the_record_says_why() -> None:
    a = run(view_with(made_claim("pod-0")))
    assert [p.name for p in a.patches] == ["dg-0"] and [c.pod for c in a.claims] == ["dg-0"]
    assert a.status is not None and "not made yet" in a.status["message"]


def test_a_claim_with_a_selector_is_left_to_kube_scheduler_on_the_planned_node_with_a_warning() -> None:
    selected = [request(selectors=[{"cel": {"expression": "true"}}])]
    a = run(view_with(made_claim("pod-0", requests=selected), made_claim("pod-1")))
    assert sorted(p.name for p in a.patches) == ["dg-0", "dg-1"] and [c.pod for c in a.claims] == ["dg-1"]
    warned = [n for _, n in a.events if n.reason == "GangClaimNotPinned"]
    assert len(warned) == 1 and "CEL selectors" in warned[0].message


def test_in_device_plugin_mode_no_claim_is_written() -> None:
    a = run(view_with(made_claim("pod-0"), made_claim("pod-1")), config=PLUGIN)
    assert not a.claims and len(a.patches) == 2
    record = record_facts(
        {
            "metadata": {"name": a.record_name, "namespace": "team"},
            "spec": {"source": "gputopo", "gang": "dg"},
            "status": a.status,
        }
    )
    assert record is not None and record.phase == "Planned"
