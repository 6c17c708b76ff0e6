"""The gang watches: what each kind keeps of an object (and which objects it keeps at all), and which kinds are
watched as the API server starts and stops serving them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from gputopo.controller.gangwatches import GangWatches, trim_gang_placement, trim_job, trim_owner, trim_pod
from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError

RESOURCES = {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}


def container(name: str = "main") -> dict[str, Any]:
    return {
        "name": name,
        "image": "trainer:1",
        "command": ["torchrun"],
        "env": [{"name": "RANK", "value": "0"}],
        "resources": RESOURCES,
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }


def pod(
    name: str = "train-0-abcde", *, gates: Any = ("gputopo.io/placement",), labels: Any = None, annotations: Any = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "generateName": "train-0-",
            "namespace": "ml",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": labels if labels is not None else {"batch.kubernetes.io/job-completion-index": "0"},
            "annotations": annotations if annotations is not None else {},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1"}],
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kube-controller-manager"}],
        },
        "spec": {
            "schedulingGates": [{"name": g} for g in gates] if isinstance(gates, tuple) else gates,
            "containers": [container()],
            "initContainers": [container("setup")],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeSelector": {"pool": "a"},
            "priority": 100,
            "serviceAccountName": "trainer",
            "terminationGracePeriodSeconds": 30,
            "subdomain": "train",
            "hostname": "train-0",
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }


def pod_template(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "train"}, "annotations": annotations or {}, "finalizers": ["x"]},
        "spec": {
            "containers": [container()],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "priorityClassName": "high",
            "restartPolicy": "Never",
        },
    }


TRIMMED_TEMPLATE = {
    "metadata": {"labels": {"app": "train"}, "annotations": {}},
    "spec": {
        "containers": [{"name": "main", "resources": RESOURCES}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "priorityClassName": "high",
    },
}


def job(spec: dict[str, Any], owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ml", "uid": "j-1", "generation": 2, "resourceVersion": "9"}
    if owners:
        meta["ownerReferences"] = owners
    return {
        "metadata": meta,
        "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 6, "template": pod_template(), **spec},
        "status": {"active": 4},
    }


# -- pods ---------------------------------------------------------------------------------------------------------


def test_a_gated_pod_keeps_what_a_gang_reader_needs_and_nothing_else() -> None:
    kept = trim_pod(pod(gates=("kueue.x-k8s.io/admission", "gputopo.io/placement")))
    assert kept is not None
    assert set(kept["metadata"]) == {
        "name",
        "generateName",
        "namespace",
        "uid",
        "labels",
        "annotations",
        "ownerReferences",
        "creationTimestamp",
    }
    assert kept["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}, {"name": "gputopo.io/placement"}]
    main = {"name": "main", "resources": RESOURCES, "env": [{"name": "RANK", "value": "0"}]}
    assert kept["spec"]["containers"] == [main]
    assert kept["spec"]["initContainers"] == [{**main, "name": "setup"}]
    assert "volumes" not in kept["spec"] and "serviceAccountName" not in kept["spec"]
    assert kept["spec"]["nodeSelector"] == {"pool": "a"} and kept["spec"]["priority"] == 100
    assert kept["spec"]["subdomain"] == "train" and kept["spec"]["terminationGracePeriodSeconds"] == 30
    assert kept["status"] == {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        (pod(), True),
        (pod(gates=(), annotations={"gputopo.io/gang-id": "job/train"}), True),
        (pod(gates=()), False),
        ({**pod(gates=()), "spec": {"schedulingGroup": {"podGroupName": "mpi"}}}, True),
        (
            {
                "metadata": {"ownerReferences": [{"kind": "PodGroup", "name": "train-x-pgt-0-y", "uid": "g"}]},
                "spec": {"schedulingGroup": {"podGroupName": "train-x-pgt-0-y"}},
            },
            False,
        ),
        (pod(gates=("kueue.x-k8s.io/admission",)), False),
        (pod(labels={"gputopo.io/job": "llm"}), False),
        (pod(gates="gputopo.io/placement"), False),
        (pod(gates=[None, "x", {"name": "gputopo.io/placement"}]), True),
        ({"metadata": "odd", "spec": ["odd"]}, False),
        ({}, False),
    ],
    ids=[
        "gated",
        "steered (annotated)",
        "no gate",
        "no gate, naming a PodGroup (a launcher without GPUs)",
        "no gate, naming the PodGroup its Job's controller made",
        "another scheduler's gate only",
        "a TrainingJob's own pod",
        "gates not a list",
        "odd gate entries",
        "odd metadata and spec",
        "empty",
    ],
)
def test_only_gang_candidates_are_kept(body: dict[str, Any], kept: bool) -> None:
    assert (trim_pod(body) is not None) is kept


# -- Jobs ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        (job({"completionMode": "Indexed"}), True),
        (job({}, owners=[{"kind": "JobSet", "name": "js", "uid": "s-1"}]), True),
        (job({"scheduling": {"podGroupTemplates": []}}), True),
        (job({"completionMode": "NonIndexed"}), False),
        (job({}), False),
    ],
    ids=["indexed", "owned", "scheduling", "non-indexed", "plain"],
)
def test_only_jobs_that_may_be_gangs_are_kept(body: dict[str, Any], kept: bool) -> None:
    assert (trim_job(body) is not None) is kept


def test_a_job_keeps_its_size_and_its_trimmed_template() -> None:
    kept = trim_job(job({"completionMode": "Indexed"}))
    assert kept == {
        "metadata": {"name": "train", "namespace": "ml", "uid": "j-1", "generation": 2},
        "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed", "template": TRIMMED_TEMPLATE},
    }


# -- the other owners ---------------------------------------------------------------------------------------------


def test_a_jobsets_replicated_jobs_keep_their_sizes_and_trimmed_pod_templates() -> None:
    jobset = {
        "metadata": {"name": "js", "namespace": "ml", "uid": "s-1", "generation": 1, "managedFields": [{}]},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "metadata": {"annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}},
                        "spec": {"parallelism": 4, "completions": 4, "template": pod_template()},
                    },
                }
            ],
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
        },
        "status": {"replicatedJobsStatus": []},
    }
    kept = trim_owner(jobset)
    replicated = kept["spec"]["replicatedJobs"][0]
    assert replicated["replicas"] == 2
    assert replicated["template"]["metadata"] == {
        "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    }
    assert replicated["template"]["spec"] == {"parallelism": 4, "completions": 4, "template": TRIMMED_TEMPLATE}
    assert kept["spec"]["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert set(kept) == {"metadata", "spec"} and "managedFields" not in kept["metadata"]


def test_a_leaderworkersets_and_a_pytorchjobs_templates_are_trimmed_where_they_are() -> None:
    lws = {
        "metadata": {"name": "lws", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 4, "leaderTemplate": pod_template(), "workerTemplate": pod_template()},
        },
    }
    kept = trim_owner(lws)["spec"]["leaderWorkerTemplate"]
    assert kept == {"size": 4, "leaderTemplate": TRIMMED_TEMPLATE, "workerTemplate": TRIMMED_TEMPLATE}
    pytorch = {
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod_template()},
                "Worker": {"replicas": 3, "template": pod_template()},
            },
            "runPolicy": {"schedulingPolicy": {"minAvailable": 4}},
        },
    }
    specs = trim_owner(pytorch)["spec"]
    assert specs["pytorchReplicaSpecs"]["Master"] == {
        "replicas": 1,
        "restartPolicy": "OnFailure",
        "template": TRIMMED_TEMPLATE,
    }
    assert specs["pytorchReplicaSpecs"]["Worker"]["template"] == TRIMMED_TEMPLATE
    assert specs["runPolicy"] == {"schedulingPolicy": {"minAvailable": 4}}


def test_odd_owners_read_as_empty_rather_than_raise() -> None:
    assert trim_owner({"metadata": None, "spec": "odd"}) == {"metadata": {}, "spec": {}}
    assert trim_job({"spec": {"completionMode": "Indexed", "template": "odd"}}) == {
        "metadata": {},
        "spec": {"completionMode": "Indexed"},
    }


def test_a_gang_placement_keeps_its_spec_and_status() -> None:
    record = {
        "metadata": {"name": "g", "namespace": "ml", "uid": "r-1", "resourceVersion": "7", "managedFields": [{}]},
        "spec": {"gang": "ml/jobset/js"},
        "status": {"generation": 3, "nodes": ["n1"]},
    }
    assert trim_gang_placement(record) == {
        "metadata": {"name": "g", "namespace": "ml", "uid": "r-1"},
        "spec": {"gang": "ml/jobset/js"},
        "status": {"generation": 3, "nodes": ["n1"]},
    }


# -- which kinds are watched --------------------------------------------------------------------------------------


class FakeApi:
    """Serves the API groups in ``served`` (each listing its objects once, then a watch that waits forever)."""

    def __init__(self, served: set[str], objects: dict[str, list[dict[str, Any]]]) -> None:
        self.served, self.objects = served, objects
        self.fail_discovery = False

    async def serves(self, group: str, version: str, plural: str) -> bool:
        if self.fail_discovery:
            raise ApiError("discover: 503 ServiceUnavailable", 503)
        return f"{group}/{version}" in self.served

    async def get(self, what: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        items = next((objs for suffix, objs in self.objects.items() if path.endswith(suffix)), [])
        return {"items": items, "metadata": {"resourceVersion": "1"}}

    async def watch(self, what: str, path: str, params: dict[str, str], *, read_timeout: float) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield {}


async def never(seconds: float) -> None:
    await asyncio.Event().wait()


def test_kinds_not_served_stay_empty_and_are_watched_once_served() -> None:
    jobset = {"metadata": {"name": "js", "namespace": "ml"}, "spec": {"replicatedJobs": []}}
    api = FakeApi({"batch/v1"}, {"/pods": [pod(), pod("plain", gates=())], "/jobsets": [jobset]})
    pokes: list[int] = []

    async def go() -> None:
        watches = GangWatches(cast(KubeClient, api), lambda: pokes.append(1), sleep=never)
        async with watches:
            assert watches.synced
            assert list(watches.pods) == [("ml", "train-0-abcde")]  # the ungated pod is not kept
            assert watches.pods["ml", "train-0-abcde"]["spec"]["nodeSelector"] == {"pool": "a"}
            assert ("ml", "train-0-abcde") in watches.pods and ("ml", "other") not in watches.pods
            assert not watches.served("jobsets") and dict(watches.job_sets) == {}
            assert not watches.served("podgroups") and len(watches.pod_groups) == 0

            api.served.add("jobset.x-k8s.io/v1alpha2")
            started = await watches.discover()
            await asyncio.gather(*(r.synced.wait() for r in started))
            assert watches.served("jobsets") and list(watches.job_sets) == [("ml", "js")]

            api.fail_discovery = True  # an error asking is no answer: what is watched stays watched
            assert await watches.discover() == [] and watches.served("jobsets")

            api.fail_discovery = False
            api.served.discard("jobset.x-k8s.io/v1alpha2")
            before = len(pokes)
            await watches.discover()
            assert not watches.served("jobsets") and len(watches.job_sets) == 0
            assert len(pokes) == before + 1  # what was known of the kind is gone: news for a pass

    asyncio.run(asyncio.wait_for(go(), 5))


def test_news_of_a_pod_already_steered_waits_and_a_gated_or_deleted_one_does_not() -> None:
    urgent: list[str] = []
    watches = GangWatches(cast(KubeClient, None), lambda: urgent.append("now"), poke_soon=lambda: urgent.append("soon"))
    parse, changed = watches._pod_news()
    steered = pod(gates=(), annotations={"gputopo.io/gang-id": "job/train"})
    assert parse("ml/a", steered, None) is not None
    changed()
    assert parse("ml/b", pod(), None) is not None
    changed()
    changed()  # a deletion: nothing parsed
    assert urgent == ["soon", "now", "now"]


def test_news_of_gputopos_own_records_waits_and_news_of_an_owner_does_not() -> None:
    record = {"metadata": {"name": "jobset-js", "namespace": "ml"}, "spec": {"gang": "js"}, "status": {}}
    group = {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    api = FakeApi(
        {"gputopo.io/v1alpha1", "scheduling.k8s.io/v1beta1"}, {"/gangplacements": [record], "/podgroups": [group]}
    )
    heard: list[str] = []

    async def go() -> None:
        watches = GangWatches(
            cast(KubeClient, api), lambda: heard.append("now"), poke_soon=lambda: heard.append("soon"), sleep=never
        )
        async with watches:
            assert len(watches.gang_placements) == 1 and len(watches.pod_groups) == 1

    asyncio.run(asyncio.wait_for(go(), 5))
    assert sorted(heard) == ["now", "soon"]  # the PodGroup's list is news at once, the record's is not
