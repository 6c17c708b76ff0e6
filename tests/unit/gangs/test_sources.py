"""Each source reads pods built as their controllers build them: the gang, rank, size and per-rank shape."""

from __future__ import annotations

from gang_builders import (
    job,
    job_pod,
    jobset,
    jobset_pods,
    lws,
    lws_pod,
    pod,
    pytorch_pod,
    pytorchjob,
    suffix,
)

from gputopo.api.trainingjob import IntraNode
from gputopo.gangs.claims import Owners
from gputopo.gangs.model import Declared, GangId, OwnerRef
from gputopo.gangs.read import read_gangs

NS = "team-a"


def test_jobset_ranks_size_and_shape_from_its_replicated_jobs() -> None:
    js = jobset("llama", ("driver", 1, 1, 0), ("workers", 2, 4, 8))
    pods = jobset_pods(js)
    read = read_gangs(pods, Owners(jobsets={(NS, "llama"): js}))
    (gang,) = read.gangs
    assert gang.id == GangId(NS, "jobset", "llama")
    assert gang.declared == Declared(9, (0, 8, 8, 8, 8, 8, 8, 8, 8), ("driver",) + ("workers",) * 8, ("",) * 9)
    # workers-1 (second child Job of "workers"), completion index 2 -> 1 + 4 + 2
    by_name = {m.pod: m.rank for m in gang.members}
    second = next(p for p in pods if p["metadata"]["name"].startswith("llama-workers-1-2-"))
    assert by_name[second["metadata"]["name"]] == 7
    assert sorted(by_name.values()) == list(range(9))
    assert gang.owner == OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "llama", js["metadata"]["uid"])
    assert gang.problems == ()
    assert gang.missing() == ()


def test_jobset_not_read_yet_is_a_gang_of_unknown_size() -> None:
    js = jobset("llama", ("workers", 2, 2, 8))
    read = read_gangs(jobset_pods(js)[:1], Owners())
    (gang,) = read.gangs
    assert gang.declared is None
    assert gang.id.name == "llama"


def test_jobset_exclusive_topology_makes_each_child_job_a_part() -> None:
    js = jobset("llama", ("workers", 3, 2, 8), exclusive="cloud.google.com/gke-nodepool")
    (gang,) = read_gangs(jobset_pods(js), Owners(jobsets={(NS, "llama"): js})).gangs
    assert gang.needs.exclusive_label == "cloud.google.com/gke-nodepool"
    assert gang.declared is not None
    assert gang.declared.parts == (
        "llama-workers-0",
        "llama-workers-0",
        "llama-workers-1",
        "llama-workers-1",
        "llama-workers-2",
        "llama-workers-2",
    )


def test_leaderworkerset_one_gang_per_group_leader_shape_from_leader_template() -> None:
    body = lws("vllm", size=4, leader_gpus=0, worker_gpus=8)
    pods = [lws_pod(body, 1, w, 0 if w == 0 else 8).build() for w in range(4)]
    pods[0]["spec"]["schedulingGates"] = []  # a 0-GPU leader is not gated: not a member
    pods.append(lws_pod(body, 0, 1, 8).build())
    read = read_gangs(pods, Owners(leaderworkersets={(NS, "vllm"): body}))
    assert [g.id.name for g in read.gangs] == ["vllm-0", "vllm-1"]
    group = read.gangs[1]
    assert group.declared == Declared(4, (0, 8, 8, 8), ("leader", "worker", "worker", "worker"))
    assert [(m.pod, m.rank) for m in group.members] == [("vllm-1-1", 1), ("vllm-1-2", 2), ("vllm-1-3", 3)]
    assert group.declared.gpu_ranks == (1, 2, 3)


def test_leaderworkerset_without_leader_template_uses_the_worker_template_for_rank_0() -> None:
    body = lws("vllm", size=2, leader_gpus=None, worker_gpus=4)
    (gang,) = read_gangs([lws_pod(body, 0, 0, 4).build()], Owners(leaderworkersets={(NS, "vllm"): body})).gangs
    assert gang.declared == Declared(2, (4, 4), ("leader", "worker"))
    assert gang.missing() == (1,)  # the worker StatefulSet comes only after the leader


def test_leaderworkerset_not_read_takes_size_from_the_pod_annotation() -> None:
    body = lws("vllm", size=3, leader_gpus=8, worker_gpus=8)
    (gang,) = read_gangs([lws_pod(body, 0, 0, 8).build()], Owners()).gangs
    assert gang.declared is not None and gang.declared.size == 3 and gang.declared.shape == (8, 8, 8)


def test_pytorchjob_master_is_rank_0_and_worker_i_rank_i_plus_1() -> None:
    body = pytorchjob("bert", masters=1, workers=3, master_gpus=8, worker_gpus=8)
    pods = [pytorch_pod(body, "master", 0, 8).build()] + [pytorch_pod(body, "worker", i, 8).build() for i in range(3)]
    (gang,) = read_gangs(pods, Owners(pytorchjobs={(NS, "bert"): body})).gangs
    assert [(m.pod, m.rank) for m in gang.members] == [
        ("bert-master-0", 0),
        ("bert-worker-0", 1),
        ("bert-worker-1", 2),
        ("bert-worker-2", 3),
    ]
    assert gang.declared == Declared(4, (8, 8, 8, 8), ("master", "worker", "worker", "worker"))


def test_pytorchjob_not_read_takes_rank_from_env_and_size_from_pet_nnodes() -> None:
    body = pytorchjob("bert", masters=1, workers=3, master_gpus=8, worker_gpus=8)
    (gang,) = read_gangs([pytorch_pod(body, "worker", 2, 8).build()], Owners()).gangs
    assert gang.members[0].rank == 3
    assert gang.declared is not None and gang.declared.size == 4


def test_pytorchjob_without_master_worker_i_is_rank_i() -> None:
    body = pytorchjob("bert", masters=0, workers=2, master_gpus=0, worker_gpus=4)
    pods = [pytorch_pod(body, "worker", i, 4).build() for i in range(2)]
    (gang,) = read_gangs(pods, Owners(pytorchjobs={(NS, "bert"): body})).gangs
    assert [m.rank for m in gang.members] == [0, 1]
    assert gang.declared == Declared(2, (4, 4), ("worker", "worker"))


def test_training_operator_pods_of_other_kinds_are_not_pytorchjobs() -> None:
    built = (
        pod("resnet-worker-0")
        .gpus(8)
        .label("training.kubeflow.org/operator-name", "tfjob-controller")
        .label("training.kubeflow.org/job-name", "resnet")
        .label("training.kubeflow.org/replica-type", "worker")
        .label("training.kubeflow.org/replica-index", "0")
        .owner("TFJob", "resnet", "kubeflow.org/v1")
    )
    assert read_gangs([built.build()], Owners()).gangs == ()


def test_indexed_job_size_is_parallelism_at_most_completions() -> None:
    body = job("sweep", parallelism=4, completions=3, gpus=2)
    pods = [job_pod(body, i, 2).build() for i in range(3)]
    (gang,) = read_gangs(pods, Owners(jobs={(NS, "sweep"): body})).gangs
    assert gang.id == GangId(NS, "job", "sweep")
    assert gang.declared == Declared(3, (2, 2, 2))
    assert gang.disruption == "single"
    assert [m.rank for m in gang.members] == [0, 1, 2]


def test_job_with_spec_scheduling_is_left_to_its_podgroup() -> None:
    body = job("sweep", parallelism=2, gpus=2)
    body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert read_gangs([job_pod(body, 0, 2).build()], Owners(jobs={(NS, "sweep"): body})).gangs == ()


def _podgroup(name: str, min_count: int | None, job_body: dict[str, object] | None = None) -> dict[str, object]:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    refs = []
    if job_body is not None:
        meta = job_body["metadata"]
        assert isinstance(meta, dict)
        refs = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True},
            {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": "w", "uid": "u"},
        ]
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": refs},
        "spec": {
            "schedulingPolicy": policy,
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
            "disruptionMode": {"all": {}},
            "priority": 1000,
        },
    }


def test_podgroup_of_a_job_with_spec_scheduling() -> None:
    body = job("train", parallelism=4, gpus=8)
    # k8s pkg/controller/job: workload <job>-<hash>, PodGroup <workload>-<template>-<hash>, template <job>-pgt-0
    workload = f"train-{suffix(10)}"
    group = f"{workload}-train-pgt-0-{suffix(10)}"
    pods = [
        job_pod(body, i, 8).group(group).owner("PodGroup", group, "scheduling.k8s.io/v1beta1", controller=False)
        for i in range(2)
    ]
    owners = Owners(podgroups={(NS, group): _podgroup(group, 4, body)}, jobs={(NS, "train"): body})
    (gang,) = read_gangs([p.build() for p in pods], owners).gangs
    assert gang.id == GangId(NS, "podgroup", group)
    assert gang.declared == Declared(4, (8, 8, 8, 8))
    assert gang.needs.required_label == "topology.kubernetes.io/rack"
    assert gang.priority == 1000
    assert gang.disruption == "all"
    assert gang.owner is not None and gang.owner.kind == "Job" and gang.owner.name == "train"
    assert gang.missing() == (2, 3)


def test_basic_podgroup_is_no_gang_and_the_indexed_job_makes_one() -> None:
    body = job("train", parallelism=2, gpus=8)
    group = "train-x-train-pgt-0-y"
    built = job_pod(body, 0, 8).group(group).build()
    owners = Owners(podgroups={(NS, group): _podgroup(group, None, body)}, jobs={(NS, "train"): body})
    (gang,) = read_gangs([built], owners).gangs
    assert gang.id == GangId(NS, "job", "train")


def test_podgroup_of_bare_pods_numbers_them_in_creation_order() -> None:
    pods = [
        pod(f"p-{name}").gpus(4).group("g").created(stamp).build()
        for name, stamp in (("b", "2026-12-04T10:00:02Z"), ("a", "2026-12-04T10:00:01Z"))
    ]
    (gang,) = read_gangs(pods, Owners(podgroups={(NS, "g"): _podgroup("g", 2)})).gangs
    assert [(m.pod, m.rank) for m in gang.members] == [("p-a", 0), ("p-b", 1)]
    assert gang.declared == Declared(2, (4, 4))


def test_plain_pod_contract_with_gpus_per_rank() -> None:
    pods = [
        pod(f"mpi-{r}")
        .gpus(0 if r == 0 else 8)
        .label("gputopo.io/gang", "mpi")
        .label("gputopo.io/gang-size", "3")
        .label("gputopo.io/rank", str(r))
        .annotate("gputopo.io/gpus-per-rank", "0,8,8")
        .annotate("gputopo.io/intra-node", "nvswitch")
        .build()
        for r in (1, 2)
    ]
    (gang,) = read_gangs(pods, Owners()).gangs
    assert gang.declared == Declared(3, (0, 8, 8))
    assert gang.needs.intra_node is IntraNode.NVSWITCH
    assert [m.rank for m in gang.members] == [1, 2]


def test_kueue_pod_group_size_from_annotation_rank_from_index_label() -> None:
    pods = [
        pod(f"infer-{suffix()}")
        .gpus(2)
        .label("kueue.x-k8s.io/pod-group-name", "infer")
        .label("kueue.x-k8s.io/pod-group-pod-index", str(i))
        .annotate("kueue.x-k8s.io/pod-group-total-count", "2")
        .gates("kueue.x-k8s.io/admission", "gputopo.io/placement")
        .build()
        for i in (1, 0)
    ]
    (gang,) = read_gangs(pods, Owners()).gangs
    assert gang.id == GangId(NS, "kueue", "infer")
    assert gang.declared == Declared(2, (2, 2))
    assert sorted(m.rank for m in gang.members) == [0, 1]
    assert all(m.held_elsewhere == ("kueue.x-k8s.io/admission",) for m in gang.members)


def test_heterogeneous_kueue_group_shape_known_once_every_pod_is_here() -> None:
    def member(i: int, gpus: int) -> dict[str, object]:
        return (
            pod(f"m-{i}")
            .gpus(gpus)
            .label("kueue.x-k8s.io/pod-group-name", "g")
            .label("kueue.x-k8s.io/pod-group-pod-index", str(i))
            .annotate("kueue.x-k8s.io/pod-group-total-count", "3")
            .build()
        )

    partial = read_gangs([member(0, 8), member(1, 4)], Owners()).gangs[0]
    assert partial.declared is None
    whole = read_gangs([member(0, 8), member(1, 4), member(2, 4)], Owners()).gangs[0]
    assert whole.declared == Declared(3, (8, 4, 4))


def test_podgroup_without_a_whole_min_count_is_a_problem_naming_it() -> None:
    group = _podgroup("g", 2)
    group["spec"]["schedulingPolicy"] = {"gang": {"minCount": "two"}}  # type: ignore[index]
    (gang,) = read_gangs([pod("p").gpus(8).group("g").build()], Owners(podgroups={(NS, "g"): group})).gangs
    assert gang.declared is None
    assert gang.problems == ("PodGroup team-a/g: spec.schedulingPolicy.gang.minCount is not a whole number ≥ 1",)


def test_podgroup_not_read_yet_is_a_member_of_unknown_size() -> None:
    (gang,) = read_gangs([pod("p").gpus(8).group("g").build()], Owners()).gangs
    assert gang.id == GangId(NS, "podgroup", "g") and gang.declared is None and gang.problems == ()


def test_leaderworkerset_exclusive_topology_is_the_groups_required_domain() -> None:
    body = lws("vllm", size=2, leader_gpus=8, worker_gpus=8)
    built = lws_pod(body, 0, 0, 8).annotate("leaderworkerset.sigs.k8s.io/exclusive-topology", "cloud/rack").build()
    (gang,) = read_gangs([built], Owners(leaderworkersets={(NS, "vllm"): body})).gangs
    assert gang.needs.required_label == "cloud/rack"
    assert gang.owner == OwnerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", body["metadata"]["uid"])


def test_podgroup_under_a_composite_group_leaves_the_gang_to_its_jobset() -> None:
    js = jobset("llama", ("workers", 2, 1, 8))
    first = jobset_pods(js)[0]
    first["spec"]["schedulingGroup"] = {"podGroupName": "llama-workers-0-pg"}
    group = _podgroup("llama-workers-0-pg", 1)
    group["spec"]["parentCompositePodGroupName"] = "llama-cpg"  # type: ignore[index]
    owners = Owners(podgroups={(NS, "llama-workers-0-pg"): group}, jobsets={(NS, "llama"): js})
    (gang,) = read_gangs([first], owners).gangs
    assert gang.id == GangId(NS, "jobset", "llama") and gang.declared is not None and gang.declared.size == 2


def _refused(read_pods: list[dict[str, object]], owners: Owners, names: str) -> None:
    (gang,) = read_gangs(read_pods, owners).gangs  # a gang with a problem is refused, never planned
    assert any(names in p and "more than a gang may hold (8192)" in p for p in gang.problems), gang.problems


def test_a_billion_replicas_is_a_problem_named_not_a_list_built() -> None:
    """A size from any source above what a gang may hold is refused at once, naming where it came from."""
    js = jobset("huge", ("workers", 1, 1, 8))
    pods = jobset_pods(js)
    js["spec"]["replicatedJobs"][0]["replicas"] = 10**9  # type: ignore[index]
    _refused(pods, Owners(jobsets={(NS, "huge"): js}), "JobSet huge: spec.replicatedJobs[0]")
    pt = pytorchjob("huge", 1, 1, 8, 8)
    pt_pods = [pytorch_pod(pt, "master", 0, 8).build()]
    pt["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 10**9  # type: ignore[index]
    _refused(pt_pods, Owners(pytorchjobs={(NS, "huge"): pt}), "PyTorchJob team-a/huge: worker.replicas")
    group = lws("huge", 2, 8, 8)
    lws_pods = [lws_pod(group, 0, 0, 8).build()]
    group["spec"]["leaderWorkerTemplate"]["size"] = 10**9  # type: ignore[index]
    _refused(lws_pods, Owners(leaderworkersets={(NS, "huge"): group}), "LeaderWorkerSet team-a/huge: size")
    big = job("huge", 2, 8)
    big["spec"]["parallelism"] = big["spec"]["completions"] = 10**9  # type: ignore[index]
    _refused([job_pod(big, 0, 8).build()], Owners(jobs={(NS, "huge"): big}), "Job team-a/huge")
