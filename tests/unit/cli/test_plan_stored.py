"""`gputopo plan --job` on manifests as the 1.37 API server stores them (``stored/``): a Job with spec.scheduling
whose gang leaves minCount unset, Indexed and NonIndexed, and a JobSet whose pods name a PodGroup in the same file,
either first or last. Each plans as the gang the operator reads from the controllers' pods and owners; a Job
scheduled pod by pod is no gang for either."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gputopo.cli.main import app

runner = CliRunner()
STORED = Path(__file__).parent / "stored"
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
CLUSTER = {
    "nodes": [
        {"name": f"{leaf}{i}", "type": "hgx-h100", "labels": {TIER0: f"leaf-{leaf}", TIER1: "spine-1"}}
        for leaf in "ab"
        for i in range(2)
    ]
}


def _plan(tmp_path: Path, job: Path, *extra: str) -> tuple[int, str, str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    result = runner.invoke(app, ["plan", "--job", str(job), "--cluster", str(cluster), *extra])
    return result.exit_code, result.stdout, result.stderr


def _reversed(tmp_path: Path, name: str) -> Path:
    """The stored file with its documents in the other order."""
    documents = list(yaml.safe_load_all((STORED / name).read_text()))
    out = tmp_path / f"reversed-{name}"
    out.write_text(yaml.safe_dump_all(documents[::-1]))
    return out


PLANNED = [
    ("indexed-job-gang-min-count-unset", "indexed-job-gang.yaml", False, "team-a", "sweep-pgt-0", [8, 8, 8]),
    ("nonindexed-job-gang-min-count-unset", "nonindexed-job-gang.yaml", False, "team-a", "sweep-pgt-0", [8, 8]),
    ("jobset-after-its-podgroup", "jobset-with-podgroup.yaml", False, "team-a", "pretrain-gang", [8, 8]),
    ("jobset-before-its-podgroup", "jobset-with-podgroup.yaml", True, "team-a", "pretrain-gang", [8, 8]),
]


@pytest.mark.parametrize(
    ("case", "name", "reverse", "namespace", "gang", "shape"), PLANNED, ids=[c[0] for c in PLANNED]
)
def test_stored_manifests_plan_as_the_operator_reads_them(
    tmp_path: Path, case: str, name: str, reverse: bool, namespace: str, gang: str, shape: list[int]
) -> None:
    job = _reversed(tmp_path, name) if reverse else STORED / name
    code, stdout, stderr = _plan(tmp_path, job, "--json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert (doc["source"], doc["namespace"], doc["gang"], doc["placed"]) == ("podgroup", namespace, gang, True)
    assert [r["rank"] for r in doc["ranks"]] == list(range(len(shape)))
    assert [len(r["gpus"]) for r in doc["ranks"]] == shape


@pytest.mark.parametrize(
    "scheduling", [{}, {"schedulingPolicy": {"basic": {}}}], ids=["no-policy-defaults-to-basic", "basic-policy"]
)
def test_a_job_scheduled_pod_by_pod_is_no_gang(tmp_path: Path, scheduling: dict[str, Any]) -> None:
    """spec.scheduling with a basic policy, or none (the Job controller's default): its PodGroup schedules pod by
    pod, so the operator makes no gang of the Job's pods and lifts their gates; plan says so in one line."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load((STORED / "indexed-job-gang.yaml").read_text()))
    body["spec"]["scheduling"] = scheduling
    job = tmp_path / "basic.yaml"
    job.write_text(yaml.safe_dump(body))
    code, stdout, stderr = _plan(tmp_path, job)
    assert code == 2 and not stdout
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {job}: pod sweep-0: no gang source knows the pod"), stderr
