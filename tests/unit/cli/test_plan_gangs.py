"""`gputopo plan --job` with a gang gputopo does not own: an Indexed Job (with and without spec.scheduling), a
JobSet, a LeaderWorkerSet group, a PyTorchJob, a PodGroup with its Pod and bare Pods that name their gang, planned
on a small cluster file; the --json shape; one line naming the field for anything it cannot plan, garbage included;
with --preempt, the victims for every shape of a JobSet, for each exclusive part in a pool of its own, and why none
helps."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gputopo.cli.main import app

runner = CliRunner()

ROOT = Path(__file__).parents[3]
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"


def _node(name: str, leaf: str) -> dict[str, Any]:
    return {"name": name, "type": "hgx-h100", "labels": {TIER0: leaf, TIER1: "spine-1"}}


CLUSTER = {"nodes": [_node("a0", "leaf-a"), _node("a1", "leaf-a"), _node("b0", "leaf-b"), _node("b1", "leaf-b")]}


def template(gpus: int, **annotations: str) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1", "resources": resources}]},
    }


def indexed_job(pods: int, gpus: int, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "team-a"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods,
            "template": template(gpus, **annotations),
        },
    }


def scheduled_job(pods: int, gpus: int) -> dict[str, Any]:
    body = indexed_job(pods, gpus)
    body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": pods}}}
    return body


def jobset(*rjobs: tuple[str, int, int, int], exclusive: str | None = None) -> dict[str, Any]:
    """Each replicated job is (name, replicas, pods per Job, GPUs per pod)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "pretrain",
            "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": name,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "completionMode": "Indexed",
                            "parallelism": pods,
                            "completions": pods,
                            "template": template(gpus),
                        }
                    },
                }
                for name, replicas, pods, gpus in rjobs
            ]
        },
    }


def lws(size: int, leader_gpus: int | None, worker_gpus: int) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": size, "workerTemplate": template(worker_gpus)}
    if leader_gpus is not None:
        lwt["leaderTemplate"] = template(leader_gpus)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 3, "leaderWorkerTemplate": lwt},
    }


def pytorchjob(masters: int, workers: int, gpus: int) -> dict[str, Any]:
    specs: dict[str, Any] = {"Worker": {"replicas": workers, "template": template(gpus)}}
    if masters:
        specs = {"Master": {"replicas": masters, "template": template(gpus)}, **specs}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ft"},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def podgroup(min_count: object, topology: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg"}, "spec": spec}


def bare_pod(gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"}, **template(gpus)}


def labelled_pod(name: str, gpus: int, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    """A bare Pod naming its gang itself (gputopo's labels, or a Kueue pod group's)."""
    body = bare_pod(gpus)
    body["metadata"] = {"name": name, "labels": labels, "annotations": annotations}
    return body


GANG_LABELS = {"gputopo.io/gang": "llm", "gputopo.io/gang-size": "2"}
KUEUE_GROUP = ({"kueue.x-k8s.io/pod-group-name": "llm"}, {"kueue.x-k8s.io/pod-group-total-count": "3"})


def _plan(tmp_path: Path, *documents: Any, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump_all(documents) if len(documents) > 1 else yaml.safe_dump(documents[0]))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    result = runner.invoke(app, ["plan", "--job", str(job), "--cluster", str(cluster), *extra])
    return result.exit_code, result.stdout, result.stderr


PLANNED = [
    ("indexed-job", [indexed_job(2, 8)], "job", "sweep", [8, 8], ["", ""]),
    ("job-with-spec-scheduling", [scheduled_job(2, 8)], "podgroup", "sweep-pgt-0", [8, 8], ["", ""]),
    ("jobset", [jobset(("driver", 1, 1, 4), ("workers", 2, 1, 8))], "jobset", "pretrain", [4, 8, 8],
     ["driver", "workers", "workers"]),
    ("leaderworkerset-group", [lws(3, 0, 8)], "leaderworkerset", "serve-0", [0, 8, 8], ["leader", "worker", "worker"]),
    ("pytorchjob", [pytorchjob(1, 2, 8)], "pytorchjob", "ft", [8, 8, 8], ["master", "worker", "worker"]),
    ("podgroup-and-pod", [podgroup(2), bare_pod(8)], "podgroup", "pg", [8, 8], ["", ""]),
    ("pod-then-podgroup", [bare_pod(4), podgroup(3)], "podgroup", "pg", [4, 4, 4], ["", "", ""]),
    ("bare-pods-naming-their-gang", [labelled_pod(f"t-{r}", 8, {**GANG_LABELS, "gputopo.io/rank": str(r)}, {})
                                     for r in range(2)], "gputopo", "llm", [8, 8], ["", ""]),
    ("a-kueue-pod-group-s-pod", [labelled_pod("w", 4, *KUEUE_GROUP)], "kueue", "llm", [4, 4, 4], ["", "", ""]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "documents", "source", "gang", "shape", "roles"), PLANNED, ids=[c[0] for c in PLANNED]
)
def test_each_kind_is_planned_as_a_gang(
    tmp_path: Path, case: str, documents: list[Any], source: str, gang: str, shape: list[int], roles: list[str]
) -> None:
    code, stdout, stderr = _plan(tmp_path, *documents, extra=("--json",))
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert (doc["source"], doc["gang"], doc["size"], doc["placed"]) == (source, gang, len(shape), True)
    assert [r["rank"] for r in doc["ranks"]] == list(range(len(shape)))
    assert [r["role"] for r in doc["ranks"]] == roles
    assert [len(r["gpus"]) for r in doc["ranks"]] == shape
    placed = [(r["node"], g) for r in doc["ranks"] for g in r["gpus"]]
    assert len(placed) == len(set(placed)) == sum(shape)  # no GPU given twice


def test_json_shape(tmp_path: Path) -> None:
    code, stdout, _ = _plan(tmp_path, indexed_job(2, 8, **{"gputopo.io/intra-node": "nvswitch"}), extra=("--json",))
    assert code == 0
    doc = json.loads(stdout)
    assert set(doc) == {
        "source", "namespace", "gang", "size", "placed", "ranks", "estimatedBusBandwidthGBps", "bottleneck", "tier",
        "tierDomain", "network",
    }  # fmt: skip
    assert doc["namespace"] == "team-a"
    assert set(doc["ranks"][0]) == {"rank", "role", "gpuCount", "node", "gpus", "nics"}
    assert doc["tier"] == 0 and doc["tierDomain"] in ("spine-1/leaf-a", "spine-1/leaf-b")
    assert doc["estimatedBusBandwidthGBps"] > 0
    assert [t["label"] for t in doc["network"]["tiers"]] == [TIER0, TIER1]


def test_text_names_each_rank_node_and_gpus(tmp_path: Path) -> None:
    code, stdout, _ = _plan(tmp_path, lws(3, 0, 8))
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("leaderworkerset default/serve-0: 3 ranks, 16 GPUs under tier-0 switch")
    assert lines[1].startswith("estimated bus bandwidth") and "limited by" in lines[1]
    assert "rank   0 (leader)" in lines[2] and "no GPUs" in lines[2]
    assert "rank   1 (worker)" in lines[3] and "GPUs 0,1,2,3,4,5,6,7" in lines[3]


def test_exclusive_parts_take_domains_of_their_own(tmp_path: Path) -> None:
    code, stdout, _ = _plan(tmp_path, jobset(("workers", 2, 2, 8), exclusive=TIER0), extra=("--json",))
    assert code == 0
    nodes = [r["node"] for r in json.loads(stdout)["ranks"]]
    assert {nodes[0][0], nodes[1][0]} != {nodes[2][0], nodes[3][0]} and len({n[0] for n in nodes}) == 2


def test_unplaceable_gang_says_why_and_exits_1(tmp_path: Path) -> None:
    body = indexed_job(2, 8, **{"gputopo.io/required-tier": "0", "gputopo.io/min-bus-bandwidth": "9999"})
    code, stdout, _ = _plan(tmp_path, body)
    assert code == 1 and stdout.startswith("Unplaceable: ")
    code, stdout, _ = _plan(tmp_path, body, extra=("--json",))
    doc = json.loads(stdout)
    assert code == 0 and doc["placed"] is False and doc["reason"]


@pytest.mark.parametrize("example", ["examples/indexed-job-gang.yaml", "examples/gangs/jobset-gang.yaml"])
def test_the_gang_examples_plan(tmp_path: Path, example: str) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    result = runner.invoke(app, ["plan", "--job", str(ROOT / example), "--cluster", str(cluster), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["placed"] is True


def _with(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(document)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


ANNOTATIONS = ("spec", "template", "metadata", "annotations")
REFUSED = [
    ("podgroup-alone", [podgroup(2)], (), "PodGroup pg: no Pod to use as the gang's pod template"),
    ("unknown-kind", [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}], (),
     "kind: Deployment is none of TrainingJob, Job, JobSet"),
    ("wrong-api-version", [{**indexed_job(2, 8), "apiVersion": "batch/v2"}], (),
     'apiVersion: "batch/v2", a Job is batch/v1'),
    ("bad-annotation", [_with(indexed_job(2, 8), (*ANNOTATIONS, "gputopo.io/intra-node"), "fast")], (),
     'annotation gputopo.io/intra-node: "fast" is not one of'),
    ("parallelism-as-text", [_with(indexed_job(2, 8), ("spec", "parallelism"), "two")], (),
     "spec.parallelism: 'two' is not a whole number"),
    ("job-not-indexed", [_with(indexed_job(2, 8), ("spec", "completionMode"), "NonIndexed")], (),
     'spec.completionMode: "NonIndexed"; a gang is an Indexed Job'),
    ("min-count-zero", [podgroup(0), bare_pod(8)], (), "spec.schedulingPolicy.gang.minCount: 0 is not a whole"),
    ("basic-podgroup", [_with(podgroup(2), ("spec", "schedulingPolicy"), {"basic": {}}), bare_pod(8)], (),
     "spec.schedulingPolicy: not gang"),
    ("larger-than-the-cluster", [indexed_job(5, 8)], (), "the gang asks for 40 GPUs, the cluster has 32 in all"),
    ("no-gpus", [indexed_job(2, 0)], (), "no rank asks for GPUs"),
    ("unknown-replica-type", [_with(pytorchjob(0, 2, 8), ("spec", "pytorchReplicaSpecs", "Chief"), {"replicas": 1})],
     (), 'replica type "chief" is not Master or Worker'),
    ("gpus-as-text", [_with(lws(2, None, 8), ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers",
                                              0, "resources", "limits", "nvidia.com/gpu"), "eight")], (), "eight"),
    ("no-name", [_with(jobset(("w", 1, 2, 8)), ("metadata",), {})], (), "metadata.name: a JobSet needs a name"),
    ("two-trainingjobs", [{"kind": "TrainingJob"}, {"kind": "TrainingJob"}], (), "holds 2 documents"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "documents", "extra", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refusals_are_one_line_naming_the_field(
    tmp_path: Path, case: str, documents: list[Any], extra: tuple[str, ...], words: str
) -> None:
    code, stdout, stderr = _plan(tmp_path, *documents, extra=extra)
    assert code == 2 and not stdout
    blamed = "--preempt" if extra else tmp_path / "job.yaml"
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {blamed}: "), stderr
    assert words in lines[0], stderr


scalars = st.none() | st.booleans() | st.integers(-3, 10**12) | st.text(max_size=8)
garbage = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
MANIFESTS = [indexed_job(2, 8), scheduled_job(2, 8), jobset(("w", 2, 1, 8)), lws(2, None, 8), pytorchjob(1, 1, 8),
             podgroup(2)]  # fmt: skip


def _paths(document: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def spoiled(draw: st.DrawFn) -> dict[str, Any]:
    document = draw(st.sampled_from(MANIFESTS))
    path = draw(st.sampled_from(_paths(document)))
    return _with(document, path, draw(garbage))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=spoiled())
def test_garbage_in_a_gang_manifest_is_never_a_traceback(tmp_path: Path, document: dict[str, Any]) -> None:
    documents = [document, bare_pod(8)] if document.get("kind") == "PodGroup" else [document]
    code, _, stderr = _plan(tmp_path, *documents, extra=("--json",))
    assert code in (0, 1, 2), stderr
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'job.yaml'}: "), stderr


def test_a_gang_of_more_pods_than_a_gang_may_hold_is_one_line_at_once(tmp_path: Path) -> None:
    body = _with(indexed_job(2, 8), ("spec", "parallelism"), 10**9)
    code, _, stderr = _plan(tmp_path, body)
    assert code == 2
    assert stderr.strip().endswith("spec.parallelism: 1000000000 is more pods than a gang may hold (8192)")
    assert len(stderr.strip().splitlines()) == 1


# -- --preempt ------------------------------------------------------------------------------------------------

ALL = list(range(8))


def _preempt_cluster() -> dict[str, Any]:
    """Four 8-GPU nodes in two pools (and two leaves), each held whole by a research gang; the later ones started,
    the less they lose."""
    nodes = [
        {"name": n, "type": "hgx-h100", "labels": {TIER0: f"leaf-{n[0]}", TIER1: "spine-1", "pool": n[0]}}
        for n in ("a0", "a1", "b0", "b1")
    ]
    gangs = [
        {
            "name": f"sweep-{n}",
            "priorityClassName": "research",
            "startTime": start,
            "workers": [{"node": n, "gpus": ALL}],
        }
        for n, start in (("a0", 0), ("a1", 6000), ("b0", 100), ("b1", 6500))
    ]
    classes = [{"name": "research", "value": 100}, {"name": "prod", "value": 1000}]
    return {"now": 7200, "priorityClasses": classes, "nodes": nodes, "gangs": gangs}


def _preempt(tmp_path: Path, document: dict[str, Any], *extra: str) -> tuple[int, str]:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(_preempt_cluster()))
    args = ["plan", "--job", str(tmp_path / "job.yaml"), "--cluster", str(tmp_path / "cluster.yaml"), "--preempt"]
    result = runner.invoke(app, [*args, *extra])
    return result.exit_code, result.stdout


def test_a_jobset_preempts_the_cheapest_gangs_for_every_shape(tmp_path: Path) -> None:
    """A 4-GPU driver and two 8-GPU workers: 20 GPUs, three nodes' worth; the three youngest research gangs go."""
    manifest = jobset(("driver", 1, 1, 4), ("workers", 2, 1, 8))
    code, out = _preempt(tmp_path, manifest, "--priority-class", "prod", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["placed"] is False
    preemption = doc["preemption"]
    assert preemption["possible"] is True and preemption["priority"] == 1000
    assert [v["name"] for v in preemption["victims"]] == ["sweep-a1", "sweep-b0", "sweep-b1"]
    sizes = sorted(len(w["gpus"]) for w in preemption["placement"]["workers"])
    assert sizes == [4, 8, 8]
    code, text = _preempt(tmp_path, manifest, "--priority-class", "prod")
    assert code == 0 and "Preempt 3 gangs" in text and "then 1 x 4 + 2 x 8 GPUs" in text


def test_exclusive_parts_each_clear_a_pool_of_their_own(tmp_path: Path) -> None:
    """Two Jobs of one 8-GPU pod, exclusive by pool: the youngest gang of each pool goes, one Job per pool."""
    code, out = _preempt(tmp_path, jobset(("w", 2, 1, 8), exclusive="pool"), "--priority-class", "prod", "--json")
    assert code == 0, out
    preemption = json.loads(out)["preemption"]
    assert [v["name"] for v in preemption["victims"]] == ["sweep-a1", "sweep-b1"]
    assert preemption["domain"]["level"] == "exclusive"
    assert sorted(w["node"] for w in preemption["placement"]["workers"]) == ["a1", "b1"]


def test_a_gang_of_no_higher_priority_preempts_nobody(tmp_path: Path) -> None:
    code, out = _preempt(tmp_path, jobset(("w", 1, 2, 8)))
    assert code == 1 and "No preemption helps" in out and "no running gang may be preempted for it" in out
    doc = json.loads(_preempt(tmp_path, jobset(("w", 1, 2, 8)), "--json")[1])
    assert doc["preemption"]["possible"] is False


def test_an_unknown_priority_class_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(jobset(("w", 1, 2, 8))))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(_preempt_cluster()))
    args = ["plan", "--job", str(tmp_path / "job.yaml"), "--cluster", str(tmp_path / "cluster.yaml")]
    result = runner.invoke(app, [*args, "--preempt", "--priority-class", "urgent"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "priority class 'urgent' is not in the cluster file's priorityClasses" in result.stderr
