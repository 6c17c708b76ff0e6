"""Which pods a gang waits for and how its ranks are numbered where its pods do not all take GPUs, come from several
owners, or outnumber the group's ``minCount``; and where two sources of one pod disagree, the gang says so."""

from __future__ import annotations

from typing import Any

import pytest
from gang_builders import Body, job, job_pod, jobset, jobset_pods, lws, lws_pod, pod, suffix, uid

from gputopo.gangs.claims import Owners
from gputopo.gangs.model import Declared, Gang, GangId
from gputopo.gangs.read import read_gangs
from gputopo.gangs.sources.podgroup import user_group

NS = "team-a"


def _group(name: str, min_count: int) -> Body:
    """A PodGroup as a user writes it for jobs that share it: no owner, a gang policy."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": uid()},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _launcher_pod(job_name: str, group: str) -> Body:
    """The pod of a NonIndexed launcher Job (1.37 Job controller: generateName ``<job>-``, no completion index),
    without GPUs, so the admission policy left it ungated."""
    job_uid = uid()
    return (
        pod(f"{job_name}-{suffix()}")
        .label("batch.kubernetes.io/controller-uid", job_uid)
        .label("batch.kubernetes.io/job-name", job_name)
        .label("controller-uid", job_uid)
        .label("job-name", job_name)
        .owner("Job", job_name, "batch/v1", job_uid)
        .group(group)
        .gates()
        .build()
    )


def _one(pods: list[Body], owners: Owners) -> Gang:
    (gang,) = read_gangs(pods, owners).gangs
    return gang


def _jobset_cpu_launcher() -> Gang:
    js = jobset("mpi", ("launcher", 1, 1, 0), ("workers", 1, 2, 8))
    rjob = "jobset.sigs.k8s.io/replicatedjob-name"
    workers = [p for p in jobset_pods(js) if p["metadata"]["labels"][rjob] != "launcher"]
    return _one(workers, Owners(jobsets={(NS, "mpi"): js}))


def _lws_cpu_leader() -> Gang:
    body = lws("serve", 3, 0, 8)
    workers = [lws_pod(body, 0, w, 8).build() for w in (1, 2)]
    return _one(workers, Owners(leaderworkersets={(NS, "serve"): body}))


def _mpi_podgroup(launcher_seen: bool) -> Gang:
    workers = job("mpi-worker", parallelism=2, gpus=8)
    pods = [job_pod(workers, i, 8).group("mpi").build() for i in range(2)]
    if launcher_seen:
        pods.append(_launcher_pod("mpi-launcher", "mpi"))
    return _one(pods, Owners(podgroups={(NS, "mpi"): _group("mpi", 3)}, jobs={(NS, "mpi-worker"): workers}))


@pytest.mark.parametrize(
    ("read", "declared", "cpu_rank"),
    [
        (_jobset_cpu_launcher, Declared(3, (0, 8, 8), ("launcher", "workers", "workers"), ("",) * 3), 0),
        (_lws_cpu_leader, Declared(3, (0, 8, 8), ("leader", "worker", "worker")), 0),
        (lambda: _mpi_podgroup(True), Declared(3, (8, 8, 0), ("mpi-worker", "mpi-worker", "mpi-launcher")), 2),
        (lambda: _mpi_podgroup(False), Declared(3, (8, 8, 0)), 2),
    ],
    ids=["jobset-cpu-launcher", "lws-cpu-leader", "mpi-podgroup", "mpi-podgroup-launcher-not-created-yet"],
)
def test_a_rank_without_gpus_is_not_waited_for(read: Any, declared: Declared, cpu_rank: int) -> None:
    gang = read()
    assert gang.problems == ()
    assert gang.declared == declared
    assert declared.shape[cpu_rank] == 0
    assert gang.missing() == ()


def test_an_ungated_launcher_naming_the_podgroup_is_a_bystander_of_its_gang() -> None:
    gang = _mpi_podgroup(True)
    launcher = next(m for m in gang.members if m.gpus == 0)
    assert launcher.bystander and not launcher.gated and launcher.rank == 2
    assert all(not m.bystander for m in gang.members if m.gpus)


def test_an_ungated_pod_of_a_podgroup_with_no_gated_member_makes_no_gang() -> None:
    assert read_gangs([_launcher_pod("cpu-only", "cpu")], Owners(podgroups={(NS, "cpu"): _group("cpu", 1)})).gangs == ()


def _shared(order: str) -> list[Body]:
    """A launcher Job (Indexed, one pod, no GPUs) and a worker Job (Indexed, two pods of 8 GPUs) sharing PodGroup
    ``mpi``: the launcher and worker 0 are both completion index 0."""
    launcher = job("mpi-launcher", parallelism=1, gpus=0)
    workers = job("mpi-worker", parallelism=2, gpus=8)
    pods = [job_pod(launcher, 0, 0).group("mpi").gates().build()]
    pods += [job_pod(workers, i, 8).group("mpi").build() for i in range(2)]
    return pods if order == "launcher-first" else pods[::-1]


@pytest.mark.parametrize("order", ["launcher-first", "workers-first"])
def test_jobs_sharing_a_podgroup_are_ranked_by_owner_then_index_and_shaped_from_all(order: str) -> None:
    launcher = job("mpi-launcher", parallelism=1, gpus=0)
    workers = job("mpi-worker", parallelism=2, gpus=8)
    owners = Owners(
        podgroups={(NS, "mpi"): _group("mpi", 3)},
        jobs={(NS, "mpi-launcher"): launcher, (NS, "mpi-worker"): workers},
    )
    gang = _one(_shared(order), owners)
    assert gang.problems == ()
    assert gang.declared == Declared(3, (8, 8, 0), ("mpi-worker", "mpi-worker", "mpi-launcher"))
    assert [(m.pod.rsplit("-", 2)[0], m.rank) for m in gang.members] == [
        ("mpi-worker", 0),
        ("mpi-worker", 1),
        ("mpi-launcher", 2),
    ]


def test_a_podgroup_below_its_jobs_parallelism_is_the_jobs_pods() -> None:
    body = job("train", parallelism=4, gpus=8)
    pods = [job_pod(body, i, 8).group("train").build() for i in range(2)]
    gang = _one(pods, Owners(podgroups={(NS, "train"): _group("train", 2)}, jobs={(NS, "train"): body}))
    assert gang.declared == Declared(4, (8,) * 4)
    assert gang.missing() == (2, 3)


def test_a_podgroup_of_bare_pods_is_the_pods_that_exist_at_least_min_count() -> None:
    pods = [pod(f"p-{i}").gpus(4).group("g").created(f"2026-12-04T10:00:0{i}Z").build() for i in range(3)]
    gang = _one(pods, Owners(podgroups={(NS, "g"): _group("g", 2)}))
    assert gang.declared == Declared(3, (4, 4, 4))
    few = _one(pods[:1], Owners(podgroups={(NS, "g"): _group("g", 2)}))
    assert few.declared == Declared(2, (4, 4)) and few.missing() == (1,)


def _podgroup_and_kueue(kueue_count: str) -> Body:
    return (
        pod("both")
        .gpus(8)
        .group("g")
        .label("kueue.x-k8s.io/pod-group-name", "g")
        .label("kueue.x-k8s.io/pod-group-pod-index", "0")
        .annotate("kueue.x-k8s.io/pod-group-total-count", kueue_count)
        .build()
    )


def _jobset_pod_with_lws_labels() -> tuple[Body, Owners]:
    js = jobset("train", ("workers", 1, 2, 8))
    first = jobset_pods(js)[0]
    first["metadata"]["labels"] |= {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    return first, Owners(jobsets={(NS, "train"): js})


def _trainjob_pod(nnodes: str) -> tuple[Body, Owners]:
    """A TrainJob's trainer pod: its JobSet (owned by the TrainJob) runs 2 pods in replicated job ``node``; the
    torch plugin sets ``PET_NNODES`` from the TrainJob's numNodes."""
    js = jobset("llm", ("node", 1, 2, 8))
    js["metadata"]["ownerReferences"] = [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llm", "uid": uid(),
         "controller": True}
    ]  # fmt: skip
    first = jobset_pods(js)[0]
    first["spec"]["containers"][0]["env"] = [{"name": "PET_NNODES", "value": nnodes}]
    return first, Owners(jobsets={(NS, "llm"): js})


@pytest.mark.parametrize(
    ("built", "source", "said"),
    [
        (
            lambda: (_podgroup_and_kueue("3"), Owners(podgroups={(NS, "g"): _group("g", 2)})),
            "podgroup",
            "pod both: PodGroup g (spec.schedulingGroup.podGroupName) 2 pods, Kueue pod group g "
            "(label kueue.x-k8s.io/pod-group-name) 3 pods; read as the PodGroup's",
        ),
        (
            _jobset_pod_with_lws_labels,
            "jobset",
            "carries the labels of JobSet train (label jobset.sigs.k8s.io/jobset-name) and LeaderWorkerSet group "
            "serve-0 (label leaderworkerset.sigs.k8s.io/name); read as the JobSet's",
        ),
        (
            lambda: _trainjob_pod("4"),
            "jobset",
            "of TrainJob llm (JobSet llm): PET_NNODES is '4', its replicated job node runs 2 pods; the JobSet's count "
            "is used",
        ),
    ],
    ids=["podgroup-and-kueue-one-name", "jobset-pod-with-lws-labels", "trainjob-pet-nnodes"],
)
def test_sources_that_disagree_are_named_on_the_gang(built: Any, source: str, said: str) -> None:
    body, owners = built()
    gang = _one([body], owners)
    assert gang.id.source == source
    assert gang.problems == ()
    assert len(gang.disagreements) == 1 and said in gang.disagreements[0]


@pytest.mark.parametrize(
    "built",
    [
        lambda: (_podgroup_and_kueue("2"), Owners(podgroups={(NS, "g"): _group("g", 2)})),
        lambda: _trainjob_pod("2"),
    ],
    ids=["podgroup-and-kueue-agree", "trainjob-pet-nnodes-agrees"],
)
def test_sources_that_agree_say_nothing(built: Any) -> None:
    body, owners = built()
    assert _one([body], owners).disagreements == ()


def test_a_gang_of_many_pods_that_disagree_says_it_once_with_a_count() -> None:
    js = jobset("llm", ("node", 1, 5, 8))
    pods = jobset_pods(js)
    for p in pods:
        p["spec"]["containers"][0]["env"] = [{"name": "PET_NNODES", "value": "4"}]
    gang = _one(pods, Owners(jobsets={(NS, "llm"): js}))
    assert len(gang.disagreements) == 3 and gang.disagreements[-1] == "and 3 more pods alike"


def test_gangid_of_a_shared_group_is_the_podgroup() -> None:
    assert _mpi_podgroup(True).id == GangId(NS, "podgroup", "mpi")


def _mpijob_pods(name: str, workers: int, gpus: int, group: str) -> list[Body]:
    """An MPIJob's pods as the training-operator (v1.9 ``pkg/controller.v1/mpi``) makes them: ``<job>-launcher``
    (replica-type launcher, job-role master, no GPUs, so ungated) first, then ``<job>-worker-<i>``, all owned by
    the MPIJob; the user's templates name the PodGroup."""
    job_uid = uid()

    def made(pod_name: str, rtype: str, stamp: str) -> Any:
        return (
            pod(pod_name)
            .label("training.kubeflow.org/operator-name", "mpijob-controller")
            .label("training.kubeflow.org/job-name", name)
            .label("training.kubeflow.org/replica-type", rtype)
            .owner("MPIJob", name, "kubeflow.org/v1", job_uid)
            .group(group)
            .created(stamp)
        )

    launcher = made(f"{name}-launcher", "launcher", "2026-12-04T10:00:00Z").label(
        "training.kubeflow.org/job-role", "master"
    )
    pods = [launcher.gates().build()]
    for i in range(workers):
        worker = made(f"{name}-worker-{i}", "worker", f"2026-12-04T10:00:0{i + 1}Z").gpus(gpus)
        pods.append(worker.label("training.kubeflow.org/replica-index", str(i)).build())
    return pods


def test_an_mpijob_shaped_podgroup_ranks_its_workers_first_and_does_not_wait_for_its_launcher() -> None:
    gang = _one(_mpijob_pods("mpi", 2, 4, "mpi"), Owners(podgroups={(NS, "mpi"): _group("mpi", 3)}))
    assert gang.problems == ()
    assert gang.declared == Declared(3, (4, 4, 0))
    assert [(m.pod, m.rank, m.bystander) for m in gang.members] == [
        ("mpi-worker-0", 0, False),
        ("mpi-worker-1", 1, False),
        ("mpi-launcher", 2, True),
    ]
    assert gang.missing() == ()


def test_an_ungated_pod_of_a_group_its_jobs_controller_made_is_no_bystander() -> None:
    body = job("train", parallelism=2, gpus=8)
    group = f"train-{suffix(10)}-train-pgt-0-{suffix(10)}"
    made = [
        job_pod(body, i, 8).group(group).owner("PodGroup", group, "scheduling.k8s.io/v1beta1", controller=False)
        for i in range(2)
    ]
    made[1].gates()  # steered by no one, ungated: not read (the Job's template declares the group whole)
    gang = _one(
        [p.build() for p in made], Owners(podgroups={(NS, group): _group(group, 2)}, jobs={(NS, "train"): body})
    )
    assert [m.pod for m in gang.members] == [made[0].build()["metadata"]["name"]]


def test_an_mpijob_launcher_seen_before_all_workers_moves_no_gpu_rank() -> None:
    launcher, first, second = _mpijob_pods("mpi", 2, 4, "mpi")
    owners = Owners(podgroups={(NS, "mpi"): _group("mpi", 3)})
    early = _one([launcher, first], owners)
    assert early.declared == Declared(3, (4, 4, 0))
    assert [(m.pod, m.rank) for m in early.members] == [("mpi-worker-0", 0), ("mpi-launcher", 2)]
    assert early.missing() == (1,)
    later = _one([launcher, first, second], owners)
    assert [(m.pod, m.rank) for m in later.members] == [("mpi-worker-0", 0), ("mpi-worker-1", 1), ("mpi-launcher", 2)]


def _pod_naming(owner_kind: str, owner: str, group: str) -> dict[str, object]:
    ref = {"apiVersion": "batch/v1", "kind": owner_kind, "name": owner, "uid": "u-1", "controller": True}
    return {"metadata": {"ownerReferences": [ref]}, "spec": {"schedulingGroup": {"podGroupName": group}}}


@pytest.mark.parametrize(
    ("owner_kind", "owner", "group", "user_written"),
    [
        # As the 1.37.2 Job controller names the group of a Job with no spec.scheduling (read off the sandbox).
        ("Job", "plain", "plain-7f974bd565-plain-pgt-0-6cfb5d9774", False),
        ("Job", "pair-launcher", "pair", True),
        ("Job", "train", "train-group", True),
        ("MPIJob", "m", "m-7f974bd565-launcher", True),
    ],
    ids=["job-controllers-group", "launcher-job-in-users-group", "group-named-after-its-job", "not-a-job"],
)
def test_only_a_group_its_user_wrote_keeps_an_ungated_pod(
    owner_kind: str, owner: str, group: str, user_written: bool
) -> None:
    assert bool(user_group(_pod_naming(owner_kind, owner, group))) is user_written
