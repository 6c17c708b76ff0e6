"""The floor under the PodGroup way of ``bench_gangs.py``: a gang's steering writes made by a client that decides
nothing.

Two ways of ``bench_gangs.py`` run no operator. A floor client (``python bench/podgroup_floor.py``, started by the
benchmark through ``floor.Replayer`` in a process of its own, its CPU counted as ``floor client``) watches the
gated pods of the way's namespace and, once every pod of a gang is seen, sends each the very patch the operator
sends (``gputopo.gangs.steer.steer_patch``: the node in its required affinity, its planned GPUs and placement
generation in its annotations, gputopo's gate lifted), for the node and GPUs the operator planned for that rank in
the same run's PodGroup way (that way's GangPlacements, as they ended). Nothing is planned and nothing is read but
the watches, so what is left of the time to Running is what the API server, etcd, kube-scheduler and the simulated
kubelets need for those writes beside the submission on this machine.

* ``minimal``: the least an operator that keeps the contract of a gang it does not own (a GangPlacement per gang,
  owned by the PodGroup, saying where the gang runs and that it runs) could write: the pods' patches, then, once
  every pod of the gang is seen Running, the GangPlacement created and its status written, Running with the plan.
* ``pinned``: below that contract: the pods' patches only, no record at all.

Both steer at most ``floor.GANGS_AT_ONCE`` gangs at once.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from floor import GANGS_AT_ONCE, ClientRun, Watch, serve
from gang_trace import BASELINE_LABEL
from gputopo.gangs.model import GATE, GangId
from gputopo.gangs.steer import steer_patch
from gputopo.kube.client import KubeClient, load_configuration

__all__ = ["PODGROUP_FLOOR_WAYS", "SteerWrites", "steer", "steer_writes"]

PODGROUP_FLOOR_WAYS = ("minimal", "pinned")
_UID = "00000000-0000-0000-0000-000000000000"  # replaced by the PodGroup's own uid when it is seen


@dataclass(frozen=True)
class SteerWrites:
    """One gang's writes, made ready before anything is submitted: each pod's node and GPUs, and (``minimal``)
    its GangPlacement and the status to write on it once the gang runs (the owner's uid filled in later)."""

    gang: str  # the PodGroup's name
    generation: int
    ranks: Mapping[str, tuple[str, tuple[int, ...]]]  # pod -> (node, GPUs)
    record: dict[str, Any] | None = None
    status: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "gang": self.gang,
            "generation": self.generation,
            "ranks": {pod: [node, list(gpus)] for pod, (node, gpus) in self.ranks.items()},
            "record": self.record,
            "status": self.status,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SteerWrites:
        ranks = {str(pod): (str(node), tuple(int(g) for g in gpus)) for pod, (node, gpus) in body["ranks"].items()}
        return cls(str(body["gang"]), int(body["generation"]), ranks, body.get("record"), body.get("status"))

    def owned(self, uid: str) -> dict[str, Any]:
        """The GangPlacement to create, owned by the PodGroup of ``uid``."""
        if self.record is None:
            raise ValueError(f"{self.gang}: this way writes no record")
        body = copy.deepcopy(self.record)
        for ref in [*body["metadata"].get("ownerReferences", ()), body["spec"].get("owner") or {}]:
            if "uid" in ref:
                ref["uid"] = uid
        return body


def steer_writes(way: str, namespace: str, placement: Mapping[str, Any]) -> SteerWrites | None:
    """The writes of ``way`` for one gang, from the GangPlacement the operator left for it in the PodGroup way;
    None when that way never ran it (no rank placed on a pod, or not Running)."""
    if way not in PODGROUP_FLOOR_WAYS:
        raise ValueError(f"not a PodGroup floor way: {way!r}")
    spec, status = placement.get("spec") or {}, placement.get("status") or {}
    ranks = {
        str(r["pod"]): (str(r["node"]), tuple(int(g) for g in r.get("gpus") or ()))
        for r in status.get("ranks") or ()
        if r.get("pod") and r.get("node")
    }
    if status.get("phase") != "Running" or not ranks:
        return None
    gang = str(spec["gang"])
    if way == "pinned":
        return SteerWrites(gang, int(status.get("generation") or 1), ranks)
    meta = placement["metadata"]
    record_meta: dict[str, Any] = {"name": meta["name"], "namespace": namespace}
    owner = spec.get("owner")
    if owner:
        record_meta["ownerReferences"] = [{**owner, "uid": _UID}]
    record_spec = {**spec, **({"owner": {**owner, "uid": _UID}} if owner else {})}
    record = {"metadata": record_meta, "spec": record_spec}
    kept = {k: v for k, v in status.items() if k not in ("conditions", "placedAt")}
    return SteerWrites(gang, int(status.get("generation") or 1), ranks, record, kept)


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


async def steer(
    kubeconfig: str, namespace: str, writes: Mapping[str, SteerWrites], stop: asyncio.Event, ready: Callable[[], None]
) -> list[str]:
    """The floor client: each gang steered once all its pods are seen gated, its record written once they all run
    (``minimal``), until ``stop``; the errors met."""
    client = KubeClient(load_configuration(kubeconfig))
    run = ClientRun(client)
    errors, spawn = run.errors, run.spawn
    slots = asyncio.Semaphore(GANGS_AT_ONCE)
    waiting: dict[str, dict[str, dict[str, Any]]] = {}  # gang -> its pods seen gated, as first seen
    steered: set[str] = set()
    running: dict[str, set[str]] = {}
    owners: dict[str, str] = {}  # PodGroup -> uid
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    groups_path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups"

    async def patch(gang: SteerWrites, pods: Mapping[str, dict[str, Any]]) -> None:
        gang_id = GangId(namespace, "podgroup", gang.gang)
        try:
            async with slots:
                done = await asyncio.gather(
                    *(
                        client.patch_pod_json(
                            namespace, name, steer_patch(pods[name], node, gpus, gang.generation, gang_id)
                        )
                        for name, (node, gpus) in gang.ranks.items()
                    )
                )
            if not all(done):
                errors.append(f"{gang.gang}: {done.count(False)} pods changed before their patch")
        except Exception as exc:  # reported with the way's figures, never silently lost
            errors.append(f"{gang.gang}: {exc}")

    async def record(gang: SteerWrites) -> None:
        uid = owners.get(gang.gang)
        if gang.record is None or gang.status is None:
            return
        if uid is None:
            errors.append(f"{gang.gang}: its PodGroup was never seen")
            return
        try:
            body = gang.owned(uid)
            await client.create_gang_placement(body)
            await client.write_gang_placement_status(namespace, body["metadata"]["name"], gang.status)
        except Exception as exc:
            errors.append(f"{gang.gang} record: {exc}")

    def seen(pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        gang = writes.get(str((meta.get("labels") or {}).get(BASELINE_LABEL, "")))
        name = str(meta.get("name", ""))
        if gang is None or name not in gang.ranks:
            return
        if gang.gang not in steered and _gated(pod):
            pods = waiting.setdefault(gang.gang, {})
            pods.setdefault(name, dict(pod))
            if len(pods) == len(gang.ranks):
                steered.add(gang.gang)
                spawn(patch(gang, waiting.pop(gang.gang)))
        if (pod.get("status") or {}).get("phase") == "Running" and gang.record is not None:
            up = running.setdefault(gang.gang, set())
            before = len(up)
            up.add(name)
            if len(up) == len(gang.ranks) > before:
                spawn(record(gang))

    async def watch_pods(opened: asyncio.Event) -> None:
        async for event in run.events("pods", pods_path, opened, {"labelSelector": BASELINE_LABEL}):
            if event.get("type") in ("ADDED", "MODIFIED"):
                seen(event.get("object") or {})

    async def watch_groups(opened: asyncio.Event) -> None:
        async for event in run.events("PodGroups", groups_path, opened):
            meta = (event.get("object") or {}).get("metadata") or {}
            if event.get("type") == "ADDED":
                owners[str(meta.get("name"))] = str(meta.get("uid", ""))

    watches: list[Watch] = [watch_pods]
    if any(gang.record is not None for gang in writes.values()):
        watches.append(watch_groups)
    return await run.until(stop, watches, ready)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], steer, SteerWrites.from_json))
