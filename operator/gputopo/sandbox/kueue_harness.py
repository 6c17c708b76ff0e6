"""Kueue as tests and benchmarks drive it on a sandbox, through ``kubectl``: queues with a given quota, batch/v1
Jobs for a queue, and the Workloads Kueue makes of them, polled with deadlines.

The sandbox's kwok ends a Job's pod as soon as it runs (kwokctl's fast ``pod-complete`` stage selects the pods a
Job owns), so a Job whose pods bind finishes at once and gives its quota back. A Job that must hold its quota
carries a scheduling gate of its own (``HOLD_GATE``): Kueue admits it and the Job controller makes its pods, which
stay Pending, as pods do that wait for a placement. A Job whose pods gputopo must place and that must still hold
its plan carries ``UNBINDABLE`` instead: gputopo plans and steers its pods (it reads only a pod's node
constraints), and kube-scheduler never binds them, so they hold their plan's GPUs in gputopo's ledger until
something ends them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gputopo.api.group import GPU_RESOURCE
from gputopo.gangs.sources.kueue import GROUP_NAME_LABEL, TOTAL_COUNT_ANNOTATION
from gputopo.sandbox.harness import wait_for
from gputopo.sandbox.kueue_queues import (
    GPUTOPO_QUEUE,
    QUEUE_LABEL,
    cluster_queue,
    local_queue,
)

__all__ = ["HOLD_GATE", "UNBINDABLE", "KueueJobs", "batch_job", "condition", "group_pod"]

Kubectl = Callable[..., str]

HOLD_GATE = "gputopo.io/test-hold"
# Required pod affinity to a pod that never exists: kube-scheduler binds no pod with it; gputopo still plans it.
UNBINDABLE: dict[str, Any] = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"gputopo.io/test-never": "true"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


def batch_job(
    name: str,
    queue: str,
    *,
    pods: int = 1,
    gpus: int = 8,
    pod_annotations: Mapping[str, str] | None = None,
    scheduling_gates: Sequence[str] = (),
    affinity: Mapping[str, Any] | None = None,
    pod_finalizers: Sequence[str] = (),
) -> dict[str, Any]:
    """An Indexed batch/v1 Job of ``pods`` pods with ``gpus`` GPUs each, for Kueue's LocalQueue ``queue``, its pod
    template with ``pod_annotations``, ``scheduling_gates``, ``affinity`` and ``pod_finalizers`` (a pod deleted
    stays, terminating, until its finalizers are removed: ``release_pods``). Kueue's webhook creates it suspended."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "pytorch",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)},
                    "limits": {GPU_RESOURCE: str(gpus)},
                },
            }
        ],
    }
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": gate} for gate in scheduling_gates]
    if affinity:
        spec["affinity"] = dict(affinity)
    template_meta: dict[str, Any] = {"annotations": dict(pod_annotations or {})}
    if pod_finalizers:
        template_meta["finalizers"] = list(pod_finalizers)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": template_meta, "spec": spec},
        },
    }


def group_pod(
    name: str, group: str, total: int, queue: str, *, gpus: int = 8, scheduling_gates: Sequence[str] = ()
) -> dict[str, Any]:
    """A bare pod of Kueue's pod group ``group`` of ``total`` pods (sigs.k8s.io/kueue v0.17.0
    ``pkg/controller/jobs/pod/constants``) for the LocalQueue ``queue``. Kueue's pod webhook gates it
    (``kueue.x-k8s.io/admission``) until the group's Workload, named after the group, is admitted. No Job owns it, so
    kwok keeps it Running once bound."""
    job = batch_job(name, queue, gpus=gpus, scheduling_gates=scheduling_gates)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {QUEUE_LABEL: queue, GROUP_NAME_LABEL: group},
            "annotations": {TOTAL_COUNT_ANNOTATION: str(total)},
        },
        "spec": job["spec"]["template"]["spec"],
    }


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The status condition ``type_`` of ``obj``, if it has one."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def _true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    return (condition(obj, type_) or {}).get("status") == "True"


class KueueJobs:
    """Kueue's queues and the batch/v1 Jobs of one namespace."""

    def __init__(self, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace

    def _get(self, *args: str) -> Any:
        out = self.kubectl("get", *args, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def _apply(self, obj: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    # -- queues ---------------------------------------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        quota: Mapping[str, str],
        *,
        flavor: str = GPUTOPO_QUEUE,
        cohort: str | None = None,
        preemption: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> str:
        """A ClusterQueue ``name`` of ``flavor`` with ``quota`` (resource -> nominal quota), in ``cohort`` and with
        ``preemption`` (its ``spec.preemption``: ``reclaimWithinCohort``, ``withinClusterQueue``) where given, and a
        LocalQueue of the same name in this namespace for it; returns once Kueue calls the ClusterQueue Active."""
        queue = cluster_queue(name, flavor, quota, cohort=cohort)
        if preemption:
            queue["spec"]["preemption"] = dict(preemption)
        self._apply(queue)
        self._apply(local_queue(name, self.namespace, name))
        wait_for(
            f"ClusterQueue {name} active",
            lambda: _true(self._get("clusterqueue", name), "Active"),
            timeout=timeout,
        )
        return name

    def use_queues(self, *names: str) -> None:
        """LocalQueues in this namespace for the sandbox's ClusterQueues ``names`` (a LocalQueue is per namespace:
        the sandbox makes its own only in ``default``)."""
        for name in names:
            self._apply(local_queue(name, self.namespace, name))

    def delete_queue(self, name: str) -> None:
        self.kubectl("delete", "localqueue", name, "-n", self.namespace, "--ignore-not-found", "--wait=false")
        self.kubectl("delete", "clusterqueue", name, "--ignore-not-found", "--wait=false")

    # -- jobs and their workloads ---------------------------------------------------------------------------

    def create(self, job: Mapping[str, Any]) -> dict[str, Any]:
        out = self.kubectl("create", "-n", self.namespace, "-o", "json", "-f", "-", input=json.dumps(job))
        created: dict[str, Any] = json.loads(out)
        return created

    def job(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._get("job", name, "-n", self.namespace)
        return found

    def workload(self, job: str) -> dict[str, Any] | None:
        """The Workload Kueue made for the Job ``job`` (its owner)."""
        items = (self._get("workloads.kueue.x-k8s.io", "-n", self.namespace) or {}).get("items") or []
        for item in items:
            owners = item["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
                found: dict[str, Any] = item
                return found
        return None

    def deactivate(self, job: str, active: bool = False) -> None:
        """Set the Job's Workload ``spec.active``: false has Kueue evict it (reason Deactivated) and stop the Job."""
        workload = self.workload(job)
        if workload is None:
            raise AssertionError(f"Job {job} has no Workload")
        self.set_active(workload["metadata"]["name"], active)

    def set_active(self, workload: str, active: bool) -> None:
        """Set the Workload's ``spec.active`` (a pod group's Workload is named after the group)."""
        patch = json.dumps({"spec": {"active": active}})
        self.kubectl("patch", "workloads.kueue.x-k8s.io", workload, "-n", self.namespace, "--type=merge", "-p", patch)

    def release_pods(self, finalizer: str) -> None:
        """Remove ``finalizer`` from every pod of the namespace that has it, so those deleted can go."""
        for pod in (self._get("pods", "-n", self.namespace) or {}).get("items") or []:
            finalizers = pod["metadata"].get("finalizers") or []
            if finalizer in finalizers:
                at = finalizers.index(finalizer)
                patch = json.dumps([{"op": "test", "path": f"/metadata/finalizers/{at}", "value": finalizer},
                                    {"op": "remove", "path": f"/metadata/finalizers/{at}"}])  # fmt: skip
                name = pod["metadata"]["name"]
                self.kubectl("patch", "pod", name, "-n", self.namespace, "--type=json", "-p", patch, check=False)

    def group_pods(self, group: str) -> list[dict[str, Any]]:
        """The pods of Kueue's pod group ``group`` that are not being deleted."""
        out = self._get("pods", "-n", self.namespace, "-l", f"{GROUP_NAME_LABEL}={group}") or {}
        return [p for p in out.get("items") or [] if not p["metadata"].get("deletionTimestamp")]

    def pods(self, job: str) -> list[dict[str, Any]]:
        out = self._get("pods", "-n", self.namespace, "-l", f"batch.kubernetes.io/job-name={job}") or {}
        return [p for p in out.get("items") or [] if not p["metadata"].get("deletionTimestamp")]

    def wait_admitted(self, job: str, timeout: float = 60.0) -> dict[str, Any]:
        result: dict[str, Any] = wait_for(
            f"the Workload of Job {job} admitted",
            lambda: (w := self.workload(job)) is not None and _true(w, "Admitted") and w,
            timeout=timeout,
        )
        return result

    def wait_finished(self, job: str, timeout: float = 60.0) -> dict[str, Any]:
        result: dict[str, Any] = wait_for(
            f"the Workload of Job {job} finished",
            lambda: (w := self.workload(job)) is not None and _true(w, "Finished") and w,
            timeout=timeout,
        )
        return result

    def wait_pending(self, job: str, timeout: float = 60.0) -> dict[str, Any]:
        """The Job's Workload once Kueue has tried it and not reserved quota (QuotaReserved False)."""

        def pending() -> dict[str, Any] | None:
            w = self.workload(job)
            reserved = condition(w, "QuotaReserved")
            return w if reserved is not None and reserved.get("status") == "False" else None

        result: dict[str, Any] = wait_for(f"the Workload of Job {job} pending", pending, timeout=timeout)
        return result

    def wait_bound(self, job: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """``count`` pods of the Job bound to nodes and run (Running, or Succeeded as kwok ends them)."""

        def bound() -> list[dict[str, Any]] | None:
            pods = self.pods(job)
            ran = [
                p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") in ("Running", "Succeeded")
            ]
            return ran if len(ran) == count == len(pods) else None

        result: list[dict[str, Any]] = wait_for(f"{count} bound pods of Job {job}", bound, timeout=timeout)
        return result

    def wait_gated(self, job: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """``count`` pods of the Job made and held by a scheduling gate, unbound."""

        def gated() -> list[dict[str, Any]] | None:
            pods = self.pods(job)
            held = [p for p in pods if p["spec"].get("schedulingGates") and not p["spec"].get("nodeName")]
            return held if len(held) == count == len(pods) else None

        result: list[dict[str, Any]] = wait_for(f"{count} gated pods of Job {job}", gated, timeout=timeout)
        return result

    def delete(self, job: str) -> None:
        """The Job and its Workload. The garbage collector would delete the Workload, its dependent, too, but it
        learns of Kueue's CRDs only at its next discovery (every 30 s), so a sandbox just up would wait for it."""
        workload = self.workload(job)
        self.kubectl("delete", "job", job, "-n", self.namespace, "--ignore-not-found", "--wait=false")
        if workload is not None:
            name = workload["metadata"]["name"]
            self.kubectl("delete", "workloads.kueue.x-k8s.io", name, "-n", self.namespace, "--ignore-not-found")

    def delete_all(self, timeout: float = 60.0) -> None:
        """Every Job of the namespace gone, with its pods and Workloads."""
        self.kubectl("delete", "jobs", "--all", "-n", self.namespace, "--wait=false")
        # Not left to the garbage collector (see ``delete``).
        for kind in ("workloads.kueue.x-k8s.io", "pods"):
            self.kubectl(
                "delete",
                kind,
                "--all",
                "-n",
                self.namespace,
                "--grace-period=0",
                "--force",
                "--wait=false",
                check=False,
            )

        def emptied() -> bool:
            jobs = (self._get("jobs", "-n", self.namespace) or {}).get("items")
            workloads = (self._get("workloads.kueue.x-k8s.io", "-n", self.namespace) or {}).get("items")
            pods = (self._get("pods", "-n", self.namespace) or {}).get("items")
            return not jobs and not workloads and not pods

        wait_for(f"namespace {self.namespace} emptied of Jobs, Workloads and pods", emptied, timeout=timeout)
