"""Dynamic Resource Allocation, as gputopo uses it: the driver's devices, the claims, and what pins a rank.

In ``dra`` mode every rank gets a ResourceClaim of its own (``<job>-<rank>-g<generation>``) that asks
for exactly its planned GPUs of NVIDIA's device class ``gpu.nvidia.com``, pinned by a CEL selector on
the driver's ``uuid`` attribute, and the pod names that claim instead of an ``nvidia.com/gpu`` limit:
kube-scheduler can then allocate nothing but the planned devices, on nothing but the planned node.

NVIDIA's DRA driver publishes one ResourceSlice per node (pool = node name), one device per GPU named
``gpu-<minor>``, with the attributes ``type`` ("gpu") and ``uuid`` among others. The operator matches a
device to the probe's GPU by that UUID, never by index or name (the driver dropped its ``index``).

Pure: bodies in, facts out; facts in, manifests and verdicts out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from gputopo.api.fields import whole_number
from gputopo.api.group import (
    ANNOTATION_PLACEMENT_GENERATION,
    DRA_DEVICE_CLASS,
    DRA_DRIVER,
    GPU_RESOURCE,
    LABEL_JOB,
    LABEL_RANK,
)
from gputopo.control.facts import as_dict, as_list
from gputopo.placement.types import GpuChoice

__all__ = [
    "CLAIM_FINALIZER",
    "CLAIM_REQUEST",
    "DEVICE_CLASS",
    "DRIVER",
    "POD_CLAIM",
    "POD_CLAIM_ANNOTATION",
    "ClaimFacts",
    "ClaimRequest",
    "DeviceFacts",
    "DeviceRef",
    "DraView",
    "GpuAllocation",
    "SliceFacts",
    "claim_facts",
    "claim_manifest",
    "claim_name",
    "slice_facts",
    "use_claim",
    "uuid_selector",
]

DRIVER = DRA_DRIVER
DEVICE_CLASS = DRA_DEVICE_CLASS
CLAIM_REQUEST = "gpus"  # the one request of a rank's claim
POD_CLAIM = "gpus"  # the pod's name for its claim (spec.resourceClaims[].name)
RESOURCE_API = "resource.k8s.io/v1"
# kube-scheduler adds this finalizer to a claim before it writes the allocation, one update of its own per
# claim, unless the claim has it; kube-controller-manager's resourceclaim controller removes it once a deleted
# claim is neither reserved nor allocated, allocated ever or not. A rank's claim is made to be allocated, so it
# is created with the finalizer: one write and its watch events fewer per rank.
CLAIM_FINALIZER = "resource.kubernetes.io/delete-protection"
# kube-controller-manager's resourceclaim controller gives a claim it makes from a pod's template this annotation:
# the pod's name for the claim (spec.resourceClaims[].name); the pod is the claim's controlling owner.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")  # NVML's GPU-xxxxxxxx-...; nothing CEL would misread


class GpuAllocation(StrEnum):
    """Who decides which GPUs of a node a rank gets."""

    DEVICE_PLUGIN = "devicePlugin"  # the kubelet's device plugin, from an nvidia.com/gpu limit
    DRA = "dra"  # kube-scheduler, from a ResourceClaim that names the planned devices

    @property
    def gpu_choice(self) -> GpuChoice:
        """Who picks a rank's GPUs within its node: the device plugin, unless DRA claims bind the plan."""
        return GpuChoice.PLANNED if self is GpuAllocation.DRA else GpuChoice.DEVICE_PLUGIN


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device as an allocation result names it."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    ref: DeviceRef
    node: str
    uuid: str
    tainted: bool = False  # a NoSchedule or NoExecute taint: kube-scheduler allocates it to nobody new


@dataclass(frozen=True, slots=True)
class SliceFacts:
    name: str
    driver: str
    pool: str
    generation: int
    node: str
    devices: tuple[DeviceFacts, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One request of a claim's spec, as far as writing its allocation needs it. ``unpinnable`` says why an
    allocation written by anyone but kube-scheduler could not honour it ("" when it could): a CEL selector
    (only kube-scheduler evaluates CEL), subrequests, all devices of a class, admin access or capacity."""

    name: str
    device_class: str = ""
    count: int = 1
    unpinnable: str = ""


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    namespace: str
    name: str
    uid: str = ""
    job: str | None = None  # the gputopo.io/job label
    rank: int | None = None
    generation: int | None = None
    owner_uid: str | None = None  # uid of the owning TrainingJob
    allocated: tuple[DeviceRef, ...] = ()
    reserved: bool = False  # some pod is in status.reservedFor
    deleting: bool = False
    # A claim made from a template for a pod: the pod's uid and its name for the claim (spec.resourceClaims[].name).
    pod_uid: str | None = None
    pod_claim: str | None = None
    requests: tuple[ClaimRequest, ...] = ()
    constraints: bool = False  # spec.devices.constraints: only kube-scheduler's allocator honours them
    config: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)  # spec.devices.config, as written
    finalizers: tuple[str, ...] = ()


def _int(value: Any) -> int | None:
    return whole_number(value)


def slice_facts(body: Mapping[str, Any]) -> SliceFacts:
    """A ResourceSlice; a device without a string ``uuid`` of the driver's own domain is kept without one."""
    meta, spec = as_dict(body.get("metadata")), as_dict(body.get("spec"))
    pool = as_dict(spec.get("pool"))
    driver = str(spec.get("driver") or "")
    pool_name = str(pool.get("name") or "")
    node = str(spec.get("nodeName") or "")
    devices = []
    for device in map(as_dict, as_list(spec.get("devices"))):
        attributes = as_dict(device.get("attributes"))
        uuid = as_dict(attributes.get("uuid") or attributes.get(f"{driver}/uuid")).get("string")
        tainted = any(as_dict(t).get("effect") in ("NoSchedule", "NoExecute") for t in as_list(device.get("taints")))
        devices.append(
            DeviceFacts(
                DeviceRef(driver, pool_name, str(device.get("name") or "")),
                node,
                str(uuid) if isinstance(uuid, str) else "",
                tainted,
            )
        )
    return SliceFacts(
        name=str(meta.get("name") or ""),
        driver=driver,
        pool=pool_name,
        generation=_int(pool.get("generation")) or 0,
        node=node,
        devices=tuple(devices),
    )


def _request(raw: Mapping[str, Any]) -> ClaimRequest:
    name = str(raw.get("name") or "")
    if raw.get("firstAvailable"):
        return ClaimRequest(name, unpinnable=f"request {name} has subrequests (firstAvailable)")
    exactly = as_dict(raw.get("exactly"))
    device_class = str(exactly.get("deviceClassName") or "")
    count = _int(exactly.get("count"))
    why = ""
    if exactly.get("selectors"):
        why = f"request {name} has CEL selectors"
    elif exactly.get("allocationMode") == "All":
        why = f"request {name} asks for all devices of its class"
    elif exactly.get("adminAccess"):
        why = f"request {name} asks for admin access"
    elif exactly.get("capacity"):
        why = f"request {name} asks for device capacity"
    elif exactly.get("tolerations"):
        why = f"request {name} tolerates device taints"
    return ClaimRequest(name, device_class, 1 if count is None else count, why)


def claim_facts(body: Mapping[str, Any]) -> ClaimFacts:
    meta, status = as_dict(body.get("metadata")), as_dict(body.get("status"))
    devices = as_dict(as_dict(body.get("spec")).get("devices"))
    labels, annotations = as_dict(meta.get("labels")), as_dict(meta.get("annotations"))
    owner = next(
        (
            str(ref.get("uid"))
            for ref in map(as_dict, as_list(meta.get("ownerReferences")))
            if ref.get("kind") == "TrainingJob" and ref.get("uid")
        ),
        None,
    )
    results = as_list(as_dict(as_dict(status.get("allocation")).get("devices")).get("results"))
    allocated = tuple(
        DeviceRef(str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
        for r in map(as_dict, results)
    )
    job = labels.get(LABEL_JOB)
    pod_uid = next(
        (
            str(ref.get("uid"))
            for ref in map(as_dict, as_list(meta.get("ownerReferences")))
            if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("uid")
        ),
        None,
    )
    pod_claim = annotations.get(POD_CLAIM_ANNOTATION)
    return ClaimFacts(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        job=str(job) if job else None,
        rank=_int(labels.get(LABEL_RANK)),
        generation=_int(annotations.get(ANNOTATION_PLACEMENT_GENERATION)),
        owner_uid=owner,
        allocated=allocated,
        reserved=bool(as_list(status.get("reservedFor"))),
        deleting=bool(meta.get("deletionTimestamp")),
        pod_uid=pod_uid,
        pod_claim=str(pod_claim) if pod_uid and pod_claim else None,
        requests=tuple(_request(r) for r in map(as_dict, as_list(devices.get("requests")))),
        constraints=bool(as_list(devices.get("constraints"))),
        config=tuple(map(as_dict, as_list(devices.get("config")))),
        finalizers=tuple(str(f) for f in as_list(meta.get("finalizers"))),
    )


@dataclass(frozen=True)
class DraView:
    """The driver's devices and every claim in the cluster, as one pass sees them."""

    slices: Mapping[str, SliceFacts] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], ClaimFacts] = field(default_factory=dict)
    driver: str = DRIVER

    @cached_property
    def _devices(self) -> dict[DeviceRef, DeviceFacts]:
        newest: dict[str, int] = {}
        for s in self.slices.values():
            if s.driver == self.driver:
                newest[s.pool] = max(newest.get(s.pool, s.generation), s.generation)
        found: dict[DeviceRef, DeviceFacts] = {}
        for s in self.slices.values():
            if s.driver == self.driver and s.generation == newest[s.pool]:
                for device in s.devices:
                    found[device.ref] = device
        return found

    @cached_property
    def _by_uuid(self) -> dict[tuple[str, str], DeviceFacts]:
        return {(d.node, d.uuid): d for d in self._devices.values() if d.uuid}

    @cached_property
    def _holders(self) -> dict[DeviceRef, ClaimFacts]:
        return {ref: claim for claim in self.claims.values() for ref in claim.allocated}

    def devices(self) -> dict[DeviceRef, DeviceFacts]:
        """The driver's devices, from the newest generation of each pool only (as the allocator reads them)."""
        return self._devices

    def by_uuid(self) -> dict[tuple[str, str], DeviceFacts]:
        """(node, uuid) -> device."""
        return self._by_uuid

    def holders(self) -> dict[DeviceRef, ClaimFacts]:
        """Which claim each allocated device belongs to."""
        return self._holders

    @cached_property
    def _by_job(self) -> dict[tuple[str, str], tuple[ClaimFacts, ...]]:
        grouped: dict[tuple[str, str], list[ClaimFacts]] = {}
        for claim in self.claims.values():
            if claim.job is not None:
                grouped.setdefault((claim.namespace, claim.job), []).append(claim)
        return {key: tuple(sorted(found, key=lambda c: c.name)) for key, found in grouped.items()}

    def claims_of(self, namespace: str, job: str) -> tuple[ClaimFacts, ...]:
        """The claims labelled with the job's name (an earlier job of the same name's too)."""
        return self._by_job.get((namespace, job), ())

    @cached_property
    def _by_pod(self) -> dict[str, tuple[ClaimFacts, ...]]:
        grouped: dict[str, list[ClaimFacts]] = {}
        for claim in self.claims.values():
            if claim.pod_uid is not None:
                grouped.setdefault(claim.pod_uid, []).append(claim)
        return {uid: tuple(sorted(found, key=lambda c: c.name)) for uid, found in grouped.items()}

    def claims_of_pod(self, uid: str) -> tuple[ClaimFacts, ...]:
        """The claims made from templates for the pod of this uid (kube-controller-manager makes them while the
        pod is still gated)."""
        return self._by_pod.get(uid, ())

    def unavailable(self, node: str, uuids: Mapping[int, str]) -> set[int]:
        """The GPUs (index -> UUID) of ``node`` kube-scheduler cannot allocate: allocated to any claim,
        not published by the driver, or tainted."""
        out = set()
        for index, uuid in uuids.items():
            device = self._by_uuid.get((node, uuid)) if uuid else None
            if device is None or device.tainted or device.ref in self._holders:
                out.add(index)
        return out


def claim_name(job: str, rank: int, generation: int) -> str:
    """Deterministic per placement: a new plan gets new claims (a claim's spec cannot change)."""
    return f"{job}-{rank}-g{generation}"


def uuid_selector(uuids: Iterable[str], driver: str = DRIVER) -> str:
    """The CEL expression that matches exactly these GPUs; a UUID CEL could misread is a ValueError."""
    wanted = list(uuids)
    bad = [u for u in wanted if not _UUID.match(u)]
    if bad or not wanted:
        raise ValueError(f"GPU UUIDs {bad or wanted!r} cannot be pinned")
    quoted = ", ".join(f'"{u}"' for u in wanted)
    return f'device.attributes["{driver}"].uuid in [{quoted}]'


def claim_manifest(
    job: str,
    namespace: str,
    owner: Mapping[str, Any],
    rank: int,
    generation: int,
    uuids: Iterable[str],
    device_class: str = DEVICE_CLASS,
) -> dict[str, Any]:
    """A rank's ResourceClaim: exactly these GPUs, owned by the TrainingJob (deleted with it)."""
    wanted = list(uuids)
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name(job, rank, generation),
            "namespace": namespace,
            "labels": {LABEL_JOB: job, LABEL_RANK: str(rank)},
            "annotations": {ANNOTATION_PLACEMENT_GENERATION: str(generation)},
            "ownerReferences": [dict(owner)],
            "finalizers": [CLAIM_FINALIZER],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": CLAIM_REQUEST,
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": len(wanted),
                            "selectors": [{"cel": {"expression": uuid_selector(wanted)}}],
                        },
                    }
                ]
            }
        },
    }


def use_claim(pod_spec: dict[str, Any], claim: str, container: dict[str, Any]) -> None:
    """Point the pod at its claim: ``container`` gets the GPUs, and nothing asks the device plugin for any."""
    for c in pod_spec.get("containers") or []:
        resources = as_dict(c.get("resources"))
        for key in ("limits", "requests"):
            values = resources.get(key)
            if isinstance(values, dict):
                values.pop(GPU_RESOURCE, None)
    others = [r for r in as_list(pod_spec.get("resourceClaims")) if as_dict(r).get("name") != POD_CLAIM]
    pod_spec["resourceClaims"] = [*others, {"name": POD_CLAIM, "resourceClaimName": claim}]
    resources = container.setdefault("resources", {})
    mine = [c for c in as_list(resources.get("claims")) if as_dict(c).get("name") != POD_CLAIM]
    resources["claims"] = [*mine, {"name": POD_CLAIM}]
