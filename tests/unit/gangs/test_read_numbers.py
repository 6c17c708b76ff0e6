"""No value read from an object raises out of the gang reader: every label, annotation, owner spec field and env
value a source reads, set to garbage (numbers of thousands of digits, huge ints, digits of other scripts, long
strings, wrong types), is one gang's problem or a value read as absent, and the other gangs are read as before.

The reader fences what it cannot read (a pod or gang that trips it is refused, "gputopo could not read ..."); these
tests hold the parsing itself to never trip it, so they assert that no such fence was needed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from gang_builders import job, job_pod, jobset, jobset_pods, lws, lws_pod, pod, pytorch_pod, pytorchjob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.gangs import read as read_module
from gputopo.gangs.claims import Owners
from gputopo.gangs.model import GangId
from gputopo.gangs.read import read_gangs

NS = "team-a"
HUGE = "7" * 5000  # past Python's integer-string limit (4,300 digits): int() raises on it
FENCED = "gputopo could not read"


def _contract(name: str, rank: int) -> dict[str, Any]:
    return (
        pod(name)
        .gpus(8)
        .label("gputopo.io/gang", "plain")
        .label("gputopo.io/gang-size", "2")
        .label("gputopo.io/rank", str(rank))
        .annotate("gputopo.io/slice-size", "1")
        .annotate("gputopo.io/required-tier", "1")
        .annotate("gputopo.io/gpus-per-rank", "8,8")
        .build()
    )


def _kueue(name: str, index: int) -> dict[str, Any]:
    return (
        pod(name)
        .gpus(4)
        .label("kueue.x-k8s.io/pod-group-name", "kq")
        .label("kueue.x-k8s.io/pod-group-pod-index", str(index))
        .annotate("kueue.x-k8s.io/pod-group-total-count", "2")
        .build()
    )


def _world() -> tuple[list[dict[str, Any]], Owners]:
    """A gang of every source, each one the reader reads whole."""
    indexed = job("idx", parallelism=2, gpus=8)
    js = jobset("llama", ("workers", 2, 1, 8))
    leader = lws("vllm", size=2, leader_gpus=8, worker_gpus=8)
    torch = pytorchjob("pt", masters=1, workers=1, master_gpus=8, worker_gpus=8)
    group = {"metadata": {"name": "red", "namespace": NS}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    pods = [
        _contract("plain-0", 0),
        _contract("plain-1", 1),
        _kueue("kq-0", 0),
        _kueue("kq-1", 1),
        *(job_pod(indexed, i, 8).build() for i in range(2)),
        *jobset_pods(js),
        lws_pod(leader, 0, 0, 8).build(),
        lws_pod(leader, 0, 1, 8).build(),
        pytorch_pod(torch, "master", 0, 8).build(),
        pytorch_pod(torch, "worker", 0, 8).build(),
        pod("red-0").gpus(8).group("red").label("gputopo.io/rank", "0").build(),
        pod("red-1").gpus(8).group("red").label("gputopo.io/rank", "1").build(),
    ]
    owners = Owners(
        jobs={(NS, "idx"): indexed},
        jobsets={(NS, "llama"): js},
        leaderworkersets={(NS, "vllm"): leader},
        pytorchjobs={(NS, "pt"): torch},
        podgroups={(NS, "red"): group},
    )
    return pods, owners


# Every label and annotation key a source reads a number (or a name, or a list) from.
KEYS = [
    "gputopo.io/gang-size",
    "gputopo.io/rank",
    "gputopo.io/required-tier",
    "gputopo.io/preferred-tier",
    "gputopo.io/slice-size",
    "gputopo.io/min-bus-bandwidth",
    "gputopo.io/gpus-per-rank",
    "gputopo.io/gpus",
    "gputopo.io/placement-generation",
    "gputopo.io/intra-node",
    "gputopo.io/evict-bare-pods",
    "kueue.x-k8s.io/pod-group-total-count",
    "kueue.x-k8s.io/pod-group-pod-index",
    "kueue.x-k8s.io/pod-group-pod-index-label",
    "kueue.x-k8s.io/podset-required-topology",
    "batch.kubernetes.io/job-completion-index",
    "jobset.sigs.k8s.io/job-index",
    "jobset.sigs.k8s.io/job-global-index",
    "jobset.sigs.k8s.io/replicatedjob-replicas",
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "leaderworkerset.sigs.k8s.io/size",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/replica-type",
]
# Owner spec fields a source reads a count from: (owner kind in Owners, key, path).
OWNER_FIELDS = [
    ("jobs", (NS, "idx"), ("spec", "parallelism")),
    ("jobs", (NS, "idx"), ("spec", "completions")),
    ("jobsets", (NS, "llama"), ("spec", "replicatedJobs", 0, "replicas")),
    ("jobsets", (NS, "llama"), ("spec", "replicatedJobs", 0, "template", "spec", "parallelism")),
    ("jobsets", (NS, "llama"), ("spec", "replicatedJobs", 0, "template", "spec", "completions")),
    ("leaderworkersets", (NS, "vllm"), ("spec", "leaderWorkerTemplate", "size")),
    ("pytorchjobs", (NS, "pt"), ("spec", "pytorchReplicaSpecs", "Worker", "replicas")),
    ("pytorchjobs", (NS, "pt"), ("spec", "pytorchReplicaSpecs", "Master", "replicas")),
    ("podgroups", (NS, "red"), ("spec", "schedulingPolicy", "gang", "minCount")),
]
ENV = ["RANK", "PET_NODE_RANK", "PET_NNODES"]

garbage = st.one_of(
    st.sampled_from(
        [
            HUGE,
            "9" * 4301,
            "1" * 20,
            f"0,{HUGE}",
            f"{HUGE},8",
            "-1",
            "+3",
            "1_000",
            "٣",
            "²",
            "\U0001d7d7",
            "1e400",
            "nan",
            "inf",
            "0",
            "8193",
            "x" * 70_000,
            "ñ" * 300,
            " ",
            "",
        ]
    ),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.text(max_size=30),
    st.none(),
    st.booleans(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _set(body: dict[str, Any], path: tuple[Any, ...], value: object) -> None:
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


def _assert_read_without_a_fence(pods: list[dict[str, Any]], owners: Owners) -> None:
    read = read_gangs(pods, owners)
    for gang in read.gangs:
        assert not any(FENCED in p for p in gang.problems), gang.problems
        assert all(len(p) < 2_000 for p in gang.problems)  # a bad value is shown short
        if gang.declared is not None:
            assert 0 <= gang.declared.size <= MAX_GANG_SIZE
    assert not any(FENCED in r.reason for r in (*read.refused, *read.unclaimed))


def test_the_world_reads_whole() -> None:
    pods, owners = _world()
    read = read_gangs(pods, owners)
    assert len(read.gangs) == 7
    assert all(not g.problems and g.declared is not None for g in read.gangs), [g.problems for g in read.gangs]


mutation = st.one_of(
    st.tuples(st.just("label"), st.integers(0, 17), st.sampled_from(KEYS), garbage),
    st.tuples(st.just("annotation"), st.integers(0, 17), st.sampled_from(KEYS), garbage),
    st.tuples(st.just("env"), st.integers(0, 17), st.sampled_from(ENV), garbage),
    st.tuples(st.just("gpus"), st.integers(0, 17), st.just(""), garbage),
    st.tuples(st.just("owner"), st.integers(0, len(OWNER_FIELDS) - 1), st.just(""), garbage),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(mutation, min_size=1, max_size=4))
def test_no_value_read_from_an_object_raises_out_of_the_reader(mutations: list[tuple[str, int, str, Any]]) -> None:
    pods, owners = _world()
    owners_by_kind = {k: {key: copy.deepcopy(v) for key, v in getattr(owners, k).items()} for k, *_ in OWNER_FIELDS}
    for where, index, key, value in mutations:
        if where == "owner":
            kind, owner_key, path = OWNER_FIELDS[index]
            _set(owners_by_kind[kind][owner_key], path, value)
            continue
        body = pods[index % len(pods)]
        meta, spec = body["metadata"], body["spec"]
        if where == "label":
            meta["labels"][key] = value
        elif where == "annotation":
            meta["annotations"][key] = value
        elif where == "env":
            spec["containers"][0].setdefault("env", []).append({"name": key, "value": value})
        else:
            spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": value}}
    _assert_read_without_a_fence(pods, Owners(**owners_by_kind))


HUGE_CASES = {
    "gang size": ("label", "plain-0", "gputopo.io/gang-size", "label gputopo.io/gang-size"),
    "rank": ("label", "plain-1", "gputopo.io/rank", "label gputopo.io/rank"),
    "slice size": ("annotation", "plain-0", "gputopo.io/slice-size", "annotation gputopo.io/slice-size"),
    "required tier": ("annotation", "plain-0", "gputopo.io/required-tier", "annotation gputopo.io/required-tier"),
    "gpus per rank": ("annotation", "plain-0", "gputopo.io/gpus-per-rank", "annotation gputopo.io/gpus-per-rank"),
    "kueue total count": (
        "annotation",
        "kq-0",
        "kueue.x-k8s.io/pod-group-total-count",
        "kueue.x-k8s.io/pod-group-total-count",
    ),
}


@pytest.mark.parametrize(("where", "name", "key", "named"), HUGE_CASES.values(), ids=HUGE_CASES.keys())
def test_a_number_of_5000_digits_is_its_gangs_problem_naming_the_field(
    where: str, name: str, key: str, named: str
) -> None:
    pods, owners = _world()
    body = next(p for p in pods if p["metadata"]["name"] == name)
    body["metadata"]["labels" if where == "label" else "annotations"][key] = HUGE
    read = read_gangs(pods, owners)
    bad = [g for g in read.gangs if g.problems]
    assert len(bad) == 1 and len(read.gangs) == 7
    assert any(named in p and "5000 characters" in p for p in bad[0].problems), bad[0].problems
    assert all(not g.problems and g.declared is not None for g in read.gangs if g is not bad[0])


def test_a_pod_or_gang_whose_reading_trips_a_bug_is_refused_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence: a pod whose claim raises is refused, a gang whose reading raises is refused, the rest read."""
    pods, owners = _world()
    claim, gang_of = read_module.claim_pod, read_module._gang

    def tripping_claim(pod: Any, owners: Owners) -> Any:
        if pod["metadata"]["name"] == "kq-1":
            raise RuntimeError("tripped")
        return claim(pod, owners)

    def tripping_gang(gang: GangId, *args: Any) -> Any:
        if gang.name == "plain":
            raise KeyError("rank")
        return gang_of(gang, *args)

    monkeypatch.setattr(read_module, "claim_pod", tripping_claim)
    monkeypatch.setattr(read_module, "_gang", tripping_gang)
    read = read_gangs(pods, owners)
    (refused,) = read.refused
    assert refused.pod == "kq-1" and refused.reason == "gputopo could not read the pod: RuntimeError: tripped"
    plain = next(g for g in read.gangs if g.id.name == "plain")
    assert plain.problems == ("gputopo could not read the gang: KeyError: 'rank'",)
    assert sum(1 for g in read.gangs if not g.problems) == 5  # all but the tripped gang and kq (one pod short)
