"""A foreign gang's rank in DRA mode: the allocation of its pod's ResourceClaims that gives it its planned GPUs.

A pod gputopo does not own brings its own claims, usually from a ResourceClaimTemplate, and a pod's
``spec.resourceClaims`` cannot change after it is created, so gputopo cannot point it at a claim of its own. What
it can do is allocate the pod's claims itself while the pod is still gated (k8s.io/kubernetes v1.37.2):

* kube-controller-manager's resourceclaim controller makes a pod's claims from its templates whether or not the
  pod is gated (``pkg/controller/resourceclaim``, ``podNeedsWork``/``handleClaim``), each owned by the pod and
  annotated ``resource.kubernetes.io/pod-claim-name``;
* kube-apiserver lets a client with ``resourceclaims/status`` and ``resourceclaims/binding`` write
  ``status.allocation`` with no ``reservedFor`` (``pkg/apis/resource/validation``,
  ``validateResourceClaimStatusUpdate``: each result's ``request`` must name a request of the claim; an allocation,
  once written, can only be cleared, not changed);
* kube-scheduler takes an allocated claim as it is: PreFilter keeps its ``nodeSelector`` as the only nodes the
  pod may go to, Filter checks nothing else of it, Reserve allocates nothing, and PreBind only adds the pod to
  ``reservedFor`` (``pkg/scheduler/framework/plugins/dynamicresources``, ``PreFilter``, ``Filter``, ``Reserve``,
  ``bindClaim``); its allocator counts the devices as taken for every other claim. The kubelet then has the
  driver prepare exactly those devices.

So, before a pod is let go, each of its template claims is written the planned devices (the driver's
``<pool>/<device>`` found by the planned GPUs' UUIDs) with a node selector of the planned node, after the
finalizer kube-scheduler would add. What only kube-scheduler's allocator can honour (CEL selectors, constraints,
subrequests, all devices of a class, admin access, capacity, device taints) is left to it: the pod is steered to
its node and kube-scheduler picks its devices there (``Unpinned``). A claim not made yet is waited for.

Pure: a pod's body, the claims' facts and the plan in; what to write, or why not, out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gputopo.control.dra import CLAIM_FINALIZER, DEVICE_CLASS, ClaimFacts, DeviceRef, DraView
from gputopo.control.gangactions import ClaimAllocation
from gputopo.gangs.steer import add_whole

__all__ = ["Pinned", "Unpinned", "Waiting", "claim_patches", "node_selector", "pin_claims"]


@dataclass(frozen=True, slots=True)
class Pinned:
    """The writes that give the pod exactly its planned GPUs (none when its claims hold them already)."""

    writes: tuple[ClaimAllocation, ...] = ()


@dataclass(frozen=True, slots=True)
class Waiting:
    """Not yet: the pod stays gated (a claim not made yet, a planned device not free yet)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unpinned:
    """The pod's claims cannot be allocated here: it is steered to its node and kube-scheduler picks its devices."""

    reason: str


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_selector(node: str) -> dict[str, Any]:
    """The node selector kube-scheduler's allocator gives devices of a node-local ResourceSlice."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeSelectorTerms": [term]}


def _template_claims(body: Mapping[str, Any]) -> list[str]:
    """The pod's names for the claims it has made from templates (spec.resourceClaims[].name), in order."""
    entries = _mapping(body.get("spec")).get("resourceClaims")
    names = []
    for entry in entries if isinstance(entries, list) else ():
        entry = _mapping(entry)
        if entry.get("resourceClaimTemplateName") and isinstance(entry.get("name"), str):
            names.append(entry["name"])
    return names


def pin_claims(
    body: Mapping[str, Any],
    node: str,
    gpus: tuple[int, ...],
    uuids: Mapping[int, str],
    dra: DraView,
    now: datetime,
    device_class: str = DEVICE_CLASS,
) -> Pinned | Waiting | Unpinned:
    """What gives the gated pod ``body`` the GPUs ``gpus`` of ``node`` (index -> UUID in ``uuids``) through its
    template claims: their allocations (stamped ``now``), a reason to wait, or the reason kube-scheduler must
    choose."""
    meta = _mapping(body.get("metadata"))
    uid, pod = str(meta.get("uid") or ""), str(meta.get("name") or "")
    wanted = _template_claims(body)
    if not wanted:
        return Unpinned(f"pod {pod} has no ResourceClaimTemplate: its GPUs come from no claim gputopo can allocate")
    made = {c.pod_claim: c for c in dra.claims_of_pod(uid)}
    missing = [name for name in wanted if name not in made]
    if missing:
        return Waiting(f"the ResourceClaims of pod {pod} for {', '.join(missing)} are not made yet")
    claims = [made[name] for name in wanted]
    # Each claim that asks for GPUs, with its requests; every GPU request must be one gputopo can allocate.
    asking: list[tuple[ClaimFacts, list[tuple[str, int]]]] = []
    for claim in claims:
        # A request with subrequests names no class of its own: counted as one for GPUs (and so left to kube-scheduler).
        gpu_requests = [r for r in claim.requests if r.device_class == device_class or not r.device_class]
        if not gpu_requests:
            continue
        why = next((r.unpinnable for r in gpu_requests if r.unpinnable), "")
        if not why and len(gpu_requests) != len(claim.requests):
            why = "it also asks for devices of other classes"
        if not why and claim.constraints:
            why = "it has constraints"
        if why:
            return Unpinned(f"ResourceClaim {claim.name} of pod {pod}: {why}, which only kube-scheduler allocates")
        asking.append((claim, [(r.name, r.count) for r in gpu_requests]))
    total = sum(count for _, requests in asking for _, count in requests)
    if total != len(gpus):
        return Unpinned(f"the ResourceClaims of pod {pod} ask for {total} GPUs, its plan has {len(gpus)}")
    refs: list[DeviceRef] = []
    by_uuid, holders = dra.by_uuid(), dra.holders()
    for index in gpus:
        device = by_uuid.get((node, uuids.get(index, "")))
        if device is None or device.tainted:
            return Waiting(f"GPU {index} of {node} is not published by the driver, or is tainted")
        refs.append(device.ref)
    writes: list[ClaimAllocation] = []
    devices = iter(refs)
    for claim, requests in asking:
        results = [
            (name, next(devices)) for name, count in requests for _ in range(count)
        ]  # the plan's GPUs in order, request by request
        mine = {ref for _, ref in results}
        held = [ref for ref in mine if ref in holders and holders[ref].uid != claim.uid]
        if held:
            other = holders[held[0]]
            return Waiting(
                f"device {held[0].device} of {node} is allocated to ResourceClaim {other.namespace}/{other.name}"
            )
        if claim.allocated and set(claim.allocated) == mine:
            continue  # written before (the pod's patch did not go through then)
        if claim.allocated and claim.reserved:
            return Waiting(f"ResourceClaim {claim.name} of pod {pod} is allocated other devices and in use")
        writes.append(
            ClaimAllocation(
                name=claim.name,
                uid=claim.uid,
                pod=pod,
                allocation=_allocation(claim, results, node, now),
                finalizers=None if CLAIM_FINALIZER in claim.finalizers else claim.finalizers,
                replace=bool(claim.allocated),
            )
        )
    return Pinned(tuple(writes))


def _allocation(claim: ClaimFacts, results: list[tuple[str, DeviceRef]], node: str, now: datetime) -> dict[str, Any]:
    """``status.allocation`` as kube-scheduler's allocator writes it: a result per device, the claim's own
    device configuration (source FromClaim), the node the devices are reachable from, and when.

    The timestamp is not optional in practice: kube-scheduler's ``bindClaim`` (v1.37.2, with the default-on
    DRADeviceBindingConditions and DRAResourceClaimDeviceStatus) sets ``allocationTimestamp`` on an allocation that
    has none while it adds the pod to ``reservedFor``, and the API server refuses that update (an allocation cannot
    change once set): the pod would never bind. Seen on the sandbox."""
    devices: dict[str, Any] = {
        "results": [
            {"request": request, "driver": ref.driver, "pool": ref.pool, "device": ref.device}
            for request, ref in results
        ]
    }
    config = [{"source": "FromClaim", **dict(c)} for c in claim.config]
    if config:
        devices["config"] = config
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"devices": devices, "nodeSelector": node_selector(node), "allocationTimestamp": stamp}


def claim_patches(write: ClaimAllocation) -> list[tuple[bool, list[dict[str, Any]]]]:
    """The JSON patches (RFC 6902) that carry out ``write``, in order, each with whether it goes to the status
    subresource. Each first tests the claim's uid. What is added whole (the finalizers of a claim read without
    any, the allocation of a claim read unallocated) is added after a test that the path is still absent
    (``null``), so a finalizer or an allocation another writer put there meanwhile fails the patch instead of
    being replaced; the next pass reads the claim again."""
    guard = [{"op": "test", "path": "/metadata/uid", "value": write.uid}] if write.uid else []
    out: list[tuple[bool, list[dict[str, Any]]]] = []
    if write.finalizers is not None:
        finalize = add_whole("/metadata/finalizers", None, [CLAIM_FINALIZER])
        if write.finalizers:  # appended after a test that the list is still the one read
            finalize = [
                {"op": "test", "path": "/metadata/finalizers", "value": list(write.finalizers)},
                {"op": "add", "path": "/metadata/finalizers/-", "value": CLAIM_FINALIZER},
            ]
        out.append((False, [*guard, *finalize]))
    if write.replace:
        out.append((True, [*guard, {"op": "remove", "path": "/status/allocation"}]))
    out.append((True, [*guard, *add_whole("/status/allocation", None, write.allocation)]))
    return out
