"""``pods_of``: the pods built from an owner's manifest are the ones its controller makes, as far as the sources
read them: the same gang, every rank present and gated, the same declaration as from the controller's pods."""

from __future__ import annotations

from typing import Any

import pytest
from gang_builders import job, job_pod, jobset, jobset_pods, lws, lws_pod, pod, pytorch_pod, pytorchjob, suffix, uid

from gputopo.gangs.claims import Owners
from gputopo.gangs.manifests import ManifestError, pods_of
from gputopo.gangs.model import GATE, Gang
from gputopo.gangs.read import read_gangs

NS = "team-a"


def _only(pods: Any, owners: Owners) -> Gang:
    found = read_gangs(pods, owners)
    assert not found.refused and not found.unclaimed
    (gang,) = found.gangs
    return gang


def _from_manifest(*documents: dict[str, Any]) -> Gang:
    built = pods_of(documents)
    assert all({"name": GATE} in p["spec"]["schedulingGates"] for p in built.pods)
    gang = _only(built.pods, built.owners)
    assert not gang.problems and gang.missing() == ()
    return gang


def test_indexed_job() -> None:
    body = job("sweep", parallelism=3, gpus=4)
    controller = _only([job_pod(body, i, 4).build() for i in range(3)], Owners(jobs={(NS, "sweep"): body}))
    gang = _from_manifest(body)
    assert (gang.id, gang.declared, gang.disruption) == (controller.id, controller.declared, controller.disruption)


def test_jobset() -> None:
    body = jobset("pretrain", ("driver", 1, 1, 0), ("workers", 2, 2, 8), exclusive="fabric.topograph.run/tier-0")
    controller = _only(jobset_pods(body), Owners(jobsets={(NS, "pretrain"): body}))
    gang = _from_manifest(body)
    assert (gang.id, gang.declared, gang.needs) == (controller.id, controller.declared, controller.needs)
    assert [m.rank for m in gang.members] == [m.rank for m in controller.members]


def test_leaderworkerset_group_zero() -> None:
    body = lws("serve", size=4, leader_gpus=0, worker_gpus=8)
    pods = [lws_pod(body, 0, w, 0 if w == 0 else 8).build() for w in range(4)]
    controller = _only(pods, Owners(leaderworkersets={(NS, "serve"): body}))
    gang = _from_manifest(body)
    assert (gang.id, gang.declared) == (controller.id, controller.declared)


def test_pytorchjob() -> None:
    body = pytorchjob("ft", masters=1, workers=3, master_gpus=8, worker_gpus=8)
    pods = [pytorch_pod(body, "master", 0, 8).build()] + [pytorch_pod(body, "worker", i, 8).build() for i in range(3)]
    controller = _only(pods, Owners(pytorchjobs={(NS, "ft"): body}))
    gang = _from_manifest(body)
    assert (gang.id, gang.declared) == (controller.id, controller.declared)
    assert [m.pod for m in gang.members] == [m.pod for m in controller.members]


def test_job_with_spec_scheduling_is_a_podgroup_gang_the_job_controls() -> None:
    body = job("train", parallelism=2, gpus=8)
    body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    gang = _from_manifest(body)
    assert gang.id.source == "podgroup" and gang.owner is not None and gang.owner.kind == "Job"
    assert gang.declared is not None and gang.declared.shape == (8, 8)


def test_podgroup_takes_its_pod_from_the_next_document() -> None:
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "t"},
        "spec": job("x", 1, 2)["spec"]["template"]["spec"],
    }
    gang = _from_manifest(group, pod)
    assert gang.declared is not None and gang.declared.shape == (2, 2, 2)
    assert [m.rank for m in gang.members] == [0, 1, 2]
    with pytest.raises(ManifestError, match="no Pod"):
        pods_of([group])


# -- read as the operator reads what the 1.37 controllers make -------------------------------------------------


def _controller_podgroup(body: dict[str, Any], min_count: int, **more: Any) -> dict[str, Any]:
    """The PodGroup the 1.37 Job controller makes for a Job with spec.scheduling: named
    ``<job>-<hash>-<job>-pgt-0-<hash>`` (its Workload's name, then the template's), controlled by the Job, its
    gang's unset minCount the Job's parallelism."""
    meta = body["metadata"]
    name = meta["name"]
    workload = f"{name}-{suffix(10)}"
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{workload}-{name}-pgt-0-{suffix(10)}",
            "namespace": meta["namespace"],
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": meta["uid"], "controller": True},
                {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": workload, "uid": uid()},
            ],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **more},
    }


def _controller_pods(body: dict[str, Any], group: str, gpus: int, indexed: bool) -> list[dict[str, Any]]:
    """The Job controller's pods, each naming the group; a NonIndexed Job's named ``<job>-<random>``, no index."""
    meta, pods = body["metadata"], []
    for index in range(body["spec"]["parallelism"]):
        if indexed:
            built = job_pod(body, index, gpus)
        else:
            built = (
                pod(f"{meta['name']}-{suffix()}", meta["namespace"])
                .gpus(gpus)
                .label("batch.kubernetes.io/controller-uid", meta["uid"])
                .label("batch.kubernetes.io/job-name", meta["name"])
                .owner("Job", meta["name"], "batch/v1", meta["uid"])
            )
        pods.append(built.group(group).build())
    return pods


SCHEDULED = [
    ("indexed-gang-min-count-unset", "Indexed", {"schedulingPolicy": {"gang": {}}}, {}),
    ("nonindexed-gang-min-count-unset", "NonIndexed", {"schedulingPolicy": {"gang": {}}}, {}),
    (
        "indexed-gang-disrupted-whole-under-a-topology-key",
        "Indexed",
        {
            "schedulingPolicy": {"gang": {}},
            "schedulingConstraints": {"topology": [{"key": "fabric.topograph.run/tier-0"}]},
            "disruptionMode": {"all": {}},
        },
        {
            "schedulingConstraints": {"topology": [{"key": "fabric.topograph.run/tier-0"}]},
            "disruptionMode": {"all": {}},
        },
    ),
]


@pytest.mark.parametrize(("case", "mode", "scheduling", "group_spec"), SCHEDULED, ids=[c[0] for c in SCHEDULED])
def test_a_job_with_spec_scheduling_reads_as_the_job_controller_s_pods_and_podgroup(
    case: str, mode: str, scheduling: dict[str, Any], group_spec: dict[str, Any]
) -> None:
    """The Job as the API server stores it (spec.scheduling as written: a gang's minCount unset); the operator reads
    the Job controller's PodGroup, whose minCount is the Job's parallelism, and its pods."""
    body = job("train", parallelism=3, gpus=8)
    body["spec"] |= {"completionMode": mode, "scheduling": scheduling}
    group = _controller_podgroup(body, 3, **group_spec)
    pods = _controller_pods(body, group["metadata"]["name"], 8, indexed=mode == "Indexed")
    group_key = (NS, group["metadata"]["name"])
    controller = _only(pods, Owners(podgroups={group_key: group}, jobs={(NS, "train"): body}))
    gang = _from_manifest(body)
    assert gang.id.source == controller.id.source == "podgroup"
    assert (gang.declared, gang.disruption, gang.needs, gang.owner) == (
        controller.declared,
        controller.disruption,
        controller.needs,
        controller.owner,
    )
    assert gang.declared is not None and gang.declared.shape == (8, 8, 8)
    assert sorted(m.rank for m in gang.members) == sorted(m.rank for m in controller.members) == [0, 1, 2]


@pytest.mark.parametrize("mode", ["Indexed", "NonIndexed"])
def test_a_job_scheduled_pod_by_pod_is_no_gang_for_either(mode: str) -> None:
    """spec.scheduling without a policy: the Job controller makes a basic PodGroup, so no source makes a gang of
    its pods, from the controller's pods or from the manifest."""
    body = job("train", parallelism=2, gpus=8)
    body["spec"] |= {"completionMode": mode, "scheduling": {}}
    group = _controller_podgroup(body, 2)
    group["spec"]["schedulingPolicy"] = {"basic": {}}
    pods = _controller_pods(body, group["metadata"]["name"], 8, indexed=mode == "Indexed")
    controller = read_gangs(
        pods, Owners(podgroups={(NS, group["metadata"]["name"]): group}, jobs={(NS, "train"): body})
    )
    built = pods_of([body])
    planned = read_gangs(built.pods, built.owners)
    assert controller.gangs == planned.gangs == ()
    assert len(controller.unclaimed) == len(planned.unclaimed) == 2


def test_a_jobset_whose_pods_name_a_podgroup_beside_it() -> None:
    """The PodGroup first in the file or last: the JobSet's pods are the gang of the PodGroup they name, its size
    the group's minCount and its shape the child Job's template, as the operator reads the JobSet controller's
    pods with the PodGroup and the child Jobs it watches."""
    body = jobset("pretrain", ("workers", 1, 2, 8))
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulingGroup"] = {
        "podGroupName": "pretrain-gang"
    }
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pretrain-gang"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    pods = [
        {**p, "spec": {**p["spec"], "schedulingGroup": {"podGroupName": "pretrain-gang"}}} for p in jobset_pods(body)
    ]
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "pretrain-workers-0",
            "namespace": NS,
            "ownerReferences": [
                {"kind": "JobSet", "name": "pretrain", "uid": body["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": body["spec"]["replicatedJobs"][0]["template"]["spec"],
    }
    owners = Owners(
        podgroups={(NS, "pretrain-gang"): {**group, "metadata": {"name": "pretrain-gang", "namespace": NS}}},
        jobs={(NS, "pretrain-workers-0"): child},
        jobsets={(NS, "pretrain"): body},
    )
    controller = _only(pods, owners)
    for documents in ([group, body], [body, group]):
        gang = _from_manifest(*documents)
        assert (gang.id, gang.declared) == (controller.id, controller.declared)
        assert gang.owner is not None and controller.owner is not None
        assert (gang.owner.kind, gang.owner.name) == (controller.owner.kind, controller.owner.name)
        assert gang.declared is not None and gang.declared.shape == (8, 8)
