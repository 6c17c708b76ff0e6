"""`gputopo plan --preempt`: the victims, the domain and the placement (JSON and text), or why none helps;
a cluster file's running gangs, priority classes and nominations, and one line naming the field when wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gputopo.cli.main import app

runner = CliRunner()

TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"


def _node(name: str, leaf: str) -> dict[str, Any]:
    return {"name": name, "type": "hgx-h100", "labels": {TIER0: leaf, TIER1: "spine-1"}}


ALL = list(range(8))
CLUSTER: dict[str, Any] = {
    "now": 7200,
    "priorityClasses": [
        {"name": "research", "value": 100},
        {"name": "prod", "value": 1000},
        {"name": "urgent", "value": 1000, "preemptionPolicy": "Never"},
    ],
    "nodes": [_node("a0", "leaf-a"), _node("a1", "leaf-a"), _node("b0", "leaf-b"), _node("b1", "leaf-b")],
    "gangs": [
        {"name": "sweep-1", "priorityClassName": "research", "startTime": 0, "workers": [{"node": "a0", "gpus": ALL}]},
        {"name": "eval-3", "priority": 50, "startTime": 3600, "workers": [{"node": "b0", "gpus": [4, 5, 6, 7]}]},
        {"name": "sweep-2", "priorityClassName": "research", "startTime": 6000, "checkpointTime": 7000,
         "workers": [{"node": "b0", "gpus": [0, 1, 2, 3]}]},
        {"name": "serve", "priorityClassName": "prod", "workers": [{"node": "a1", "gpus": ALL}]},
        {"name": "notebook", "priority": 10, "preemptible": False, "workers": [{"node": "b1", "gpus": [0, 1]}]},
    ],
}  # fmt: skip
JOB = {
    "apiVersion": "gputopo.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llm"},
    "spec": {"workers": 1, "gpusPerWorker": 8, "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}}},
}


def _files(tmp_path: Path, cluster: dict[str, Any] = CLUSTER) -> list[str]:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(JOB))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return ["plan", "--job", str(tmp_path / "job.yaml"), "--cluster", str(tmp_path / "cluster.yaml")]


def test_running_gangs_hold_their_gpus(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--json"])
    doc = json.loads(result.stdout)
    assert doc["placed"] is False and "preemption" not in doc


def test_plan_preempt_json_names_victims_domain_and_placement(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--preempt", "--priority-class", "prod", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["preemption"]
    assert doc["possible"] is True and doc["priority"] == 1000
    assert doc["domain"] == {"level": "node", "name": "b0"}
    assert [v["name"] for v in doc["victims"]] == ["eval-3", "sweep-2"]
    assert doc["victims"][0]["movesTo"]["workers"][0]["node"] == "b1"  # eval-3 loses most: it moves
    assert doc["victims"][1]["movesTo"] is None
    assert doc["placement"]["workers"][0] == {
        "rank": 0,
        "node": "b0",
        "gpus": ALL,
        "nics": doc["placement"]["workers"][0]["nics"],
    }
    assert doc["nomination"] == [{"node": "b0", "gpus": ALL}]
    assert doc["cost"]["gangsBroken"] == 2


def test_plan_preempt_text(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--preempt", "--priority-class", "prod"])
    assert result.exit_code == 0, result.output
    assert "Preempt 2 gangs in node b0" in result.stdout
    assert "lost 4.00 GPU-h; can move at once to b1" in result.stdout
    assert "rank   0  b0" in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--priority-class", "urgent"], "its preemptionPolicy is Never"),
        ([], "no running gang may be preempted for it"),  # spec.priority 0: every gang is equal or higher
    ],
    ids=["preemption-policy-never", "priority-zero"],
)
def test_plan_preempt_says_why_none_helps(tmp_path: Path, args: list[str], words: str) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--preempt", *args])
    assert result.exit_code == 1
    assert "No preemption helps" in result.stdout and words in result.stdout
    doc = json.loads(runner.invoke(app, [*_files(tmp_path), "--preempt", *args, "--json"]).stdout)["preemption"]
    assert doc["possible"] is False and words in doc["reason"]


def test_nominated_gpus_are_not_planned_for_another_job(tmp_path: Path) -> None:
    cluster: dict[str, Any] = {**CLUSTER, "gangs": []}
    cluster["nominations"] = [{"preemptor": "other", "gpus": [{"node": n, "gpus": ALL} for n in ("a0", "a1", "b0")]}]
    doc = json.loads(runner.invoke(app, [*_files(tmp_path, cluster), "--json"]).stdout)
    assert doc["placement"]["workers"][0]["node"] == "b1"


def _running(*gangs: dict[str, Any]) -> dict[str, Any]:
    return {**CLUSTER, "gangs": list(gangs)}


def _gang(**fields: Any) -> dict[str, Any]:
    gang = {"name": "g", "priority": 1, "workers": [{"node": "a0", "gpus": [0]}], **fields}
    return {k: v for k, v in gang.items() if v is not None}


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        (_running(_gang(priority=None, priorityClassName="gold")),
         "gangs[0].priorityClassName: unknown priority class 'gold'"),
        (_running(_gang(workers=[{"node": "zz", "gpus": [0]}])), "gangs[0].workers[0].node: no node 'zz'"),
        (_running(_gang(workers=[{"node": "a0", "gpus": [8]}])), "gangs[0].workers[0].gpus[0]: no GPU8"),
        (_running(_gang(), _gang(name="h")), "gangs[1].workers[0].gpus[0]: GPU0 of a0 is also g's"),
        (_running(_gang(), _gang(workers=[{"node": "a1", "gpus": [0]}])), "gangs[1].name: 'g' is already"),
        (_running(_gang(priorityClassName="prod")), "gangs[0]: Value error, give priority or priorityClassName"),
        (_running(_gang(workers=[])), "gangs[0].workers: List should have at least 1 item"),
        (_running(_gang(startTime="noon")), "gangs[0].startTime: Input should be a valid number"),
        ({**CLUSTER, "priorityClasses": [{"name": "a", "value": 1}, {"name": "a", "value": 2}]},
         "priorityClasses[1].name: 'a' is defined twice"),
        ({**CLUSTER, "priorityClasses": [{"name": "a", "value": 1, "preemptionPolicy": "Sometimes"}]},
         "priorityClasses[0].preemptionPolicy: Input should be 'PreemptLowerPriority' or 'Never'"),
        ({**CLUSTER, "nominations": [{"preemptor": "p", "gpus": [{"node": "a9", "gpus": [0]}]}]},
         "nominations[0].gpus[0].node: no node 'a9'"),
    ],
    ids=[
        "unknown-priority-class", "gang-on-unknown-node", "gang-gpu-the-node-lacks", "gpu-in-two-gangs",
        "duplicate-gang-name", "priority-and-class", "gang-without-workers", "start-time-as-text",
        "priority-class-twice", "unknown-preemption-policy", "nomination-on-unknown-node",
    ],
)  # fmt: skip
def test_bad_cluster_file_one_line_exit_2(tmp_path: Path, cluster: dict[str, Any], words: str) -> None:
    args = _files(tmp_path, cluster)
    result = runner.invoke(app, [*args, "--preempt"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'cluster.yaml'}: "), result.stderr
    assert words in lines[0], lines[0]


def test_unknown_priority_class_option(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--preempt", "--priority-class", "gold"])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "error: priority class 'gold' is not in the cluster file's priorityClasses; known: research, prod, urgent"
    )


def test_plan_preempt_waits_for_the_victims_checkpoint(tmp_path: Path) -> None:
    """eval-3 checkpoints every 3,700 s from its start at 3,600: 100 s from now it has saved its hour of work. A
    class that may wait ten minutes for that is told to come back then; prod, which may not, preempts now."""
    cluster: dict[str, Any] = {
        **CLUSTER,
        "priorityClasses": [*CLUSTER["priorityClasses"], {"name": "batch", "value": 500, "checkpointWaitSeconds": 600}],
        "gangs": [{**g, "checkpointIntervalSeconds": 3700} if g["name"] == "eval-3" else g for g in CLUSTER["gangs"]],
    }
    args = [*_files(tmp_path, cluster), "--preempt", "--priority-class", "batch"]
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["preemption"]
    assert doc["possible"] is False and doc["retryAt"] == 7300
    assert doc["waitsForCheckpointOf"] == ["eval-3", "sweep-2"] and "checkpoint in 100 s" in doc["reason"]
    text = runner.invoke(app, args).stdout
    assert "Not yet (priority 500)" in text and "ask again at 7300" in text
    now = json.loads(
        runner.invoke(app, [*_files(tmp_path, cluster), "--preempt", "--priority-class", "prod", "--json"]).stdout
    )
    assert now["preemption"]["possible"] is True
