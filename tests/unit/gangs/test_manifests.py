"""``pods_of``: the pods built from an owner's manifest are the ones its controller makes, as far as the sources
read them: the same gang, every rank present and gated, the same declaration as from the controller's pods."""

from __future__ import annotations

from typing import Any

import pytest
from gang_builders import job, job_pod, jobset, jobset_pods, lws, lws_pod, pytorch_pod, pytorchjob

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
