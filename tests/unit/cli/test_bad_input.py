"""Every `gputopo` command answers bad input with one line naming the file and the field, and exit code 2.

Named cases for what a new user types; then generated garbage, and valid files with one field made garbage,
fed to each command: the answer is always a clean exit (0, 1 or 2), never a traceback, and a refusal is one
line on stderr that names the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gputopo.cli.main import app
from gputopo.topology.catalog import fixture_text

runner = CliRunner()

NODE = {"name": "n0", "type": "hgx-h100"}
CLUSTER = {"nodes": [NODE, {"name": "n1", "type": "hgx-h100", "usedGpus": [0]}]}
CONTAINER = {"name": "w", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 8}}}
JOB = {
    "apiVersion": "gputopo.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "tj"},
    "spec": {"workers": 1, "gpusPerWorker": 8, "template": {"spec": {"containers": [CONTAINER]}}},
}
TRACE = {"jobs": [{"name": "a", "arrival": 0, "duration": 10, "workers": 1, "gpusPerWorker": 2}]}


def _write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _with(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of the document with the field at ``path`` set to ``value``."""
    copy: Any = yaml.safe_load(yaml.safe_dump(document))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert isinstance(copy, dict)
    return copy


def _answer(args: list[str]) -> tuple[int, str, str]:
    result = runner.invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"gputopo {' '.join(args)} crashed: {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr


def _assert_one_line_naming(stderr: str, *names: str) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert all(name in lines[0] for name in names), (names, stderr)


TEMPLATE = ("spec", "template", "spec")
AFFINITY_YES = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "yes"}}


@pytest.mark.parametrize(
    ("job", "cluster", "blamed", "words"),
    [
        (_with(JOB, ("spec", "workers"), 0), CLUSTER, "job", "spec.workers: Input should be greater than or equal"),
        (_with(JOB, ("spec", "gpusPerWorker"), "eight"), CLUSTER, "job", "spec.gpusPerWorker: Input should be"),
        ("spec: [unclosed", CLUSTER, "job", "not valid YAML at line 1"),
        ("- a list", CLUSTER, "job", "expected a TrainingJob manifest"),
        (_with(JOB, (*TEMPLATE, "affinity"), AFFINITY_YES), CLUSTER, "job",
         "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: "
         "expected an object, got a string"),
        (_with(JOB, (*TEMPLATE, "nodeSelector"), ["a"]), CLUSTER, "job",
         "spec.template.spec.nodeSelector: expected an object, got a list"),
        (_with(JOB, (*TEMPLATE, "tolerations"), ["gpu"]), CLUSTER, "job",
         "spec.template.spec.tolerations[0]: expected an object, got a string"),
        (_with(JOB, (*TEMPLATE, "containers", 0, "resources"), "8 GPUs"), CLUSTER, "job",
         "spec.template.spec.containers[0].resources: expected an object, got a string"),
        (_with(JOB, (*TEMPLATE, "containers", 0, "resources", "limits"), ["nvidia.com/gpu"]), CLUSTER, "job",
         "spec.template.spec.containers[0].resources.limits: expected an object, got a list"),
        (JOB, _with(CLUSTER, ("nodes", 0, "usedGpus"), [-1]), "cluster", "nodes[0].usedGpus[0]: Input should be"),
        (JOB, _with(CLUSTER, ("nodes", 0, "usedGpus"), [9]), "cluster", "nodes[0].usedGpus[0]: no GPU9"),
        (JOB, _with(CLUSTER, ("nodes", 0, "type"), "dgx-9"), "cluster", "nodes[0].type: unknown node type 'dgx-9'"),
        (JOB, _with(CLUSTER, ("nodes", 0), {"name": "n0", "topology": "gone.txt"}), "cluster",
         "nodes[0].topology: no topology file"),
        (JOB, _with(CLUSTER, ("nodes", 1, "name"), "n0"), "cluster", "nodes[1].name: 'n0' is already the name"),
        (JOB, _with(CLUSTER, ("nodes", 0, "labels"), "a=b"), "cluster", "nodes[0].labels: Input should be a valid"),
        (JOB, _with(CLUSTER, ("nodes", 0, "taints"), "t"), "cluster", "nodes[0].taints: Input should be a valid list"),
        (JOB, _with(CLUSTER, ("nodes", 0, "downLinks"), [[0, 99]]), "cluster", "nodes[0].downLinks[0][1]: no GPU99"),
        (JOB, _with(CLUSTER, ("nodes", 0, "unhealthyGpus"), "all"), "cluster", "nodes[0].unhealthyGpus: Input should"),
    ],
    ids=[
        "job-zero-workers", "job-gpus-per-worker-as-text", "job-not-yaml", "job-a-list", "job-affinity-yes",
        "job-node-selector-as-list", "job-toleration-as-string", "job-resources-as-string", "job-limits-as-list",
        "cluster-negative-used-gpu", "cluster-used-gpu-the-node-lacks", "cluster-unknown-node-type",
        "cluster-missing-topology-file", "cluster-duplicate-node-name", "cluster-labels-as-text",
        "cluster-taints-as-text", "cluster-down-link-to-gpu-99", "cluster-unhealthy-gpus-all",
    ],
)  # fmt: skip
def test_plan_names_the_file_and_the_field(tmp_path: Path, job: Any, cluster: Any, blamed: str, words: str) -> None:
    job_path = _write(tmp_path / "job.yaml", job)
    cluster_path = _write(tmp_path / "cluster.yaml", cluster)
    code, _, stderr = _answer(["plan", "--job", str(job_path), "--cluster", str(cluster_path)])
    assert code == 2
    _assert_one_line_naming(stderr, str(job_path if blamed == "job" else cluster_path), words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["plan", "--job", "{dir}/none.yaml", "--cluster", "{dir}/cluster.yaml"], "{dir}/none.yaml: no such file"),
        (["plan", "--job", "{dir}", "--cluster", "{dir}/cluster.yaml"], "{dir}: is a directory"),
        (["simulate", "--cluster", "{dir}/cluster.yaml", "--trace", "{dir}/bad-trace.yaml"],
         "{dir}/bad-trace.yaml: jobs[0].arrival: Input should be a valid number"),
        (["simulate", "--cluster", "{dir}/bad-cluster.yaml", "--trace", "{dir}/trace.yaml"],
         "{dir}/bad-cluster.yaml: nodes[0].usedGpus[0]: no GPU9"),
        (["simulate", "--cluster", "{dir}/cluster.yaml", "--trace", "{dir}/trace.yaml", "--policy", "best"],
         "--policy: unknown policies ['best']"),
        (["estimate", "--topology", "{dir}/garbage.txt"], "{dir}/garbage.txt: "),
        (["estimate", "--topology", "hgx-h100", "--gpus", "0,99"], "--gpus: no GPU99"),
        (["topo", "show", "{dir}/none.txt"], "{dir}/none.txt: no such file"),
        (["topo", "show", "{dir}/bad-nodetopology.yaml"],
         "{dir}/bad-nodetopology.yaml: not a valid NodeTopology: status.gpus: Input should be a valid list"),
        (["topo", "import", "{dir}/garbage.txt"], "{dir}/garbage.txt: "),
        (["sandbox", "up", "--profile", "nope", "--name", "gputopo-never-up"], "unknown profile 'nope'"),
        (["sandbox", "fault", "link", "--node", "n", "--gpus", "0-1", "--state", "down", "--name", "gputopo-never-up"],
         "--gpus takes two GPU indices"),
        (["sandbox", "fault", "link", "--node", "n", "--gpus", "0,1", "--state", "down", "--name", "gputopo-never-up"],
         "sandbox 'gputopo-never-up' has no simulated nodes"),
    ],
    ids=[
        "plan-missing-job", "plan-job-is-a-directory", "simulate-arrival-as-text", "simulate-used-gpu-9",
        "simulate-unknown-policy", "estimate-garbage-topology", "estimate-gpu-99", "topo-show-missing-file",
        "topo-show-invalid-nodetopology", "topo-import-garbage", "sandbox-unknown-profile",
        "sandbox-fault-gpus-as-range", "sandbox-fault-on-no-sandbox",
    ],
)  # fmt: skip
def test_each_command_answers_in_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    _write(tmp_path / "cluster.yaml", CLUSTER)
    _write(tmp_path / "bad-cluster.yaml", _with(CLUSTER, ("nodes", 0, "usedGpus"), [9]))
    _write(tmp_path / "trace.yaml", TRACE)
    _write(tmp_path / "bad-trace.yaml", _with(TRACE, ("jobs", 0, "arrival"), "soon"))
    _write(tmp_path / "garbage.txt", "GPU0 GPU1\nGPU0 X banana\n")
    _write(tmp_path / "bad-nodetopology.yaml", {"kind": "NodeTopology", "status": {"gpus": "eight"}})
    code, _, stderr = _answer([a.replace("{dir}", str(tmp_path)) for a in args])
    assert code == 2
    _assert_one_line_naming(stderr, words.replace("{dir}", str(tmp_path)))


def test_sandbox_up_with_kueue_unbuilt_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTOPO_CACHE", str(tmp_path))  # no Kueue build in it
    code, _, stderr = _answer(["sandbox", "up", "--kueue", "--name", "gputopo-never-up"])
    assert code == 2
    _assert_one_line_naming(stderr, "hack/build-kueue.sh")
    assert not (tmp_path / "sandbox" / "gputopo-never-up").exists()  # said before any cluster starts


# -- generated garbage ----------------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12)
garbage = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _field_paths(document: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    paths = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            paths.extend(_field_paths(value, (*prefix, key)))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            paths.extend(_field_paths(value, (*prefix, i)))
    return paths


def _spoiled(document: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Garbage, or the document with one of its fields (at any depth) replaced by garbage."""
    paths = _field_paths(document)
    return garbage | st.tuples(st.sampled_from(paths), garbage).map(lambda pv: _with(document, pv[0], pv[1]))


def _check(tmp_path: Path, args: list[str], blamed: Path) -> None:
    code, _, stderr = _answer(args)
    assert code in (0, 1, 2)
    if code == 2:
        _assert_one_line_naming(stderr, str(blamed))


@SETTINGS
@given(job=_spoiled(JOB))
def test_plan_with_a_garbage_job(tmp_path: Path, job: Any) -> None:
    job_path = _write(tmp_path / "job.yaml", yaml.safe_dump(job))
    cluster_path = _write(tmp_path / "cluster.yaml", CLUSTER)
    _check(tmp_path, ["plan", "--job", str(job_path), "--cluster", str(cluster_path), "--json"], job_path)


@SETTINGS
@given(cluster=_spoiled(CLUSTER))
def test_plan_with_a_garbage_cluster(tmp_path: Path, cluster: Any) -> None:
    job_path = _write(tmp_path / "job.yaml", JOB)
    cluster_path = _write(tmp_path / "cluster.yaml", yaml.safe_dump(cluster))
    _check(tmp_path, ["plan", "--job", str(job_path), "--cluster", str(cluster_path)], cluster_path)


@SETTINGS
@given(trace=_spoiled(TRACE))
def test_simulate_with_a_garbage_trace(tmp_path: Path, trace: Any) -> None:
    cluster_path = _write(tmp_path / "cluster.yaml", CLUSTER)
    trace_path = _write(tmp_path / "trace.yaml", yaml.safe_dump(trace))
    args = ["simulate", "--cluster", str(cluster_path), "--trace", str(trace_path), "--json", "--no-exact"]
    _check(tmp_path, args, trace_path)


@SETTINGS
@given(cluster=_spoiled(CLUSTER))
def test_simulate_with_a_garbage_cluster(tmp_path: Path, cluster: Any) -> None:
    cluster_path = _write(tmp_path / "cluster.yaml", yaml.safe_dump(cluster))
    trace_path = _write(tmp_path / "trace.yaml", TRACE)
    args = ["simulate", "--cluster", str(cluster_path), "--trace", str(trace_path), "--json", "--no-exact"]
    _check(tmp_path, args, cluster_path)


_MATRIX = fixture_text("dell-c4140-4xV100-sxm2-nv2-mlx5.txt")


@SETTINGS
@given(
    text=st.text(max_size=200)
    | st.builds(lambda i, junk: _MATRIX[:i] + junk + _MATRIX[i:], st.integers(0, len(_MATRIX)), st.text(max_size=8))
    | garbage.map(yaml.safe_dump)
    | _spoiled({"kind": "NodeTopology", "status": {"gpus": [{"index": 0}], "links": []}}).map(yaml.safe_dump),
    command=st.sampled_from(["show", "import", "estimate"]),
)
def test_topology_commands_with_a_garbage_topology(tmp_path: Path, text: str, command: str) -> None:
    path = _write(tmp_path / "node.txt", text)
    args = ["estimate", "--topology", str(path)] if command == "estimate" else ["topo", command, str(path)]
    _check(tmp_path, args, path)
