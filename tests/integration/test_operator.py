"""The operator on the sandbox: real kube-apiserver and kube-scheduler, kwok GPU nodes, fake probes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gputopo.sandbox.harness import Jobs, OperatorProcess, namespaced_operator, training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "operator-test"


@pytest.fixture(scope="module")
def operator(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("operator") / "operator.log"
    with namespaced_operator(
        sandbox.kubectl, sandbox.kubeconfig, log_file, NS, {"GPUTOPO_UNSCHEDULABLE_TIMEOUT_SECONDS": "20"}
    ) as proc:
        yield proc


def _topology(sandbox: SandboxHandle, node: str) -> dict[str, Any]:
    status: dict[str, Any] = sandbox.get_json("nodetopology", node)["status"]
    return status


def _node_of_kind(sandbox: SandboxHandle, kind: str) -> str:
    for node in sandbox.nodes:
        links = _topology(sandbox, node).get("links") or []
        if links and any(link["kind"] == kind for link in links):
            return node
    pytest.skip(f"no sandbox node with {kind} links")


def _placement(jobs: Jobs, name: str) -> dict[str, Any]:
    placement: dict[str, Any] = jobs.status(name)["placement"]
    return placement


def test_single_node_job_lands_on_the_best_nvlink_group(sandbox: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("pair", NS, gpusPerWorker=2, topology={"intraNode": "nvlink"}))
    jobs.wait_phase("pair", "Running")
    worker = _placement(jobs, "pair")["workers"][0]
    links = {(link["a"], link["b"]): link for link in _topology(sandbox, worker["node"])["links"]}
    a, b = sorted(worker["gpus"])
    assert links[(a, b)]["kind"] in ("NVLink", "NVSwitch")
    best = max(link["nvlinks"] for link in links.values())
    assert links[(a, b)]["nvlinks"] == best
    pod = jobs.wait_running_pods("pair", 1)[0]
    assert pod["spec"]["nodeName"] == worker["node"]
    assert pod["metadata"]["annotations"]["gputopo.io/gpus"] == ",".join(map(str, worker["gpus"]))


def test_multi_node_job_stays_under_one_tier0_switch(sandbox: SandboxHandle, jobs: Jobs) -> None:
    jobs.apply(training_job("gang", NS, workers=2, topology={"interNode": {"requiredTier": 0}}))
    jobs.wait_phase("gang", "Running")
    nodes = {w["node"] for w in _placement(jobs, "gang")["workers"]}
    assert len(nodes) == 2
    leaves = {sandbox.get_json("node", n)["metadata"]["labels"]["fabric.topograph.run/tier-0"] for n in nodes}
    assert len(leaves) == 1
    bound = {p["spec"]["nodeName"] for p in jobs.wait_running_pods("gang", 2)}
    assert bound == nodes


def test_a_job_waits_while_the_cluster_is_full_and_starts_when_room_frees(sandbox: SandboxHandle, jobs: Jobs) -> None:
    total = sum(len(_topology(sandbox, n).get("gpus") or []) for n in sandbox.nodes)
    jobs.apply(training_job("filler", NS, workers=1, gpusPerWorker=1, priority=5))
    jobs.wait_phase("filler", "Running")
    # One job per free GPU fills the cluster; the next one has to wait.
    fill = [training_job(f"fill-{i}", NS, gpusPerWorker=1) for i in range(total - 1)]
    for manifest in fill:
        jobs.apply(manifest)
    jobs.wait(
        "cluster full", lambda: all(jobs.status(m["metadata"]["name"]).get("phase") == "Running" for m in fill), 180
    )
    jobs.apply(training_job("waiter", NS, gpusPerWorker=1))
    jobs.wait(
        "waiter reports why it waits",
        lambda: (c := jobs.condition("waiter", "Placed")) and c["status"] == "False" and c["message"],
    )
    assert jobs.status("waiter")["phase"] == "Pending"
    jobs.finish_pod("filler-0")
    jobs.wait_phase("filler", "Succeeded")
    jobs.wait_phase("waiter", "Running", timeout=60)


def test_two_jobs_never_share_a_gpu(sandbox: SandboxHandle, jobs: Jobs) -> None:
    for i in range(6):
        jobs.apply(training_job(f"share-{i}", NS, gpusPerWorker=2))
    for i in range(6):
        jobs.wait_phase(f"share-{i}", "Running", "Placing", timeout=90)
    taken: list[tuple[str, int]] = []
    for i in range(6):
        for worker in _placement(jobs, f"share-{i}")["workers"]:
            taken += [(worker["node"], g) for g in worker["gpus"]]
    assert len(taken) == len(set(taken)) == 12


def test_the_environment_is_right_for_torchrun(jobs: Jobs) -> None:
    jobs.apply(training_job("envjob", NS, workers=2, gpusPerWorker=8, topology={"interNode": {"requiredTier": 1}}))
    jobs.wait_phase("envjob", "Running")
    pods = sorted(jobs.wait_running_pods("envjob", 2), key=lambda p: p["metadata"]["name"])
    placement = _placement(jobs, "envjob")
    for rank, pod in enumerate(pods):
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == f"envjob-0.envjob.{NS}.svc"
        assert env["MASTER_PORT"] == "29500"
        assert (env["WORLD_SIZE"], env["NODE_RANK"], env["RANK"]) == ("16", str(rank), str(rank * 8))
        assert env["LOCAL_WORLD_SIZE"] == env["NPROC_PER_NODE"] == "8"
        nics = placement["workers"][rank]["nics"]
        if nics:
            assert env["NCCL_IB_HCA"] == "=" + ",".join(nics)
        assert pod["spec"]["hostname"] == f"envjob-{rank}" and pod["spec"]["subdomain"] == "envjob"
    service = json.loads(jobs.kubectl("get", "service", "envjob", "-n", NS, "-o", "json"))
    assert service["spec"]["clusterIP"] == "None"


def test_deleting_a_job_removes_its_pods_and_service(jobs: Jobs) -> None:
    jobs.apply(training_job("doomed", NS, workers=2, gpusPerWorker=4))
    jobs.wait_running_pods("doomed", 2)
    jobs.delete("doomed")
    jobs.wait("pods gone", lambda: not jobs.pods("doomed"), timeout=60)
    jobs.wait(
        "service gone",
        lambda: (
            "NotFound" in jobs.kubectl("get", "service", "doomed", "-n", NS, check=False)
            or not jobs.kubectl("get", "service", "doomed", "-n", NS, "--ignore-not-found", check=False).strip()
        ),
        timeout=60,
    )


def test_killing_the_operator_mid_placement_leaves_no_duplicates_and_finishes(
    jobs: Jobs, operator: OperatorProcess
) -> None:
    jobs.apply(training_job("crash", NS, workers=4, gpusPerWorker=8, topology={"interNode": {"requiredTier": 1}}))
    jobs.wait("some pods created", lambda: jobs.pods("crash"), timeout=60, every=0.02)
    operator.kill()
    operator.start()
    pods = jobs.wait_running_pods("crash", 4, timeout=120)
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == [f"crash-{r}" for r in range(4)]
    assert len(jobs.pods("crash")) == 4
    status = jobs.wait_phase("crash", "Running")
    planned = {(w["rank"], w["node"]) for w in status["placement"]["workers"]}
    bound = {(int(p["metadata"]["labels"]["gputopo.io/rank"]), p["spec"]["nodeName"]) for p in pods}
    assert planned == bound


def test_an_invalid_job_gets_a_clear_condition(jobs: Jobs) -> None:
    manifest = training_job("mismatch", NS, gpusPerWorker=8)
    manifest["spec"]["template"] = {
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}
    }
    jobs.apply(manifest)
    condition = jobs.wait("Invalid condition", lambda: jobs.condition("mismatch", "Invalid"))
    assert condition["status"] == "True" and condition["reason"] == "InvalidSpec"
    assert "gpusPerWorker is 8" in condition["message"] and condition["observedGeneration"] == 1
    assert jobs.pods("mismatch") == []


@pytest.mark.parametrize(
    ("name", "container", "words"),
    [
        ("bad-port", {"name": "trainer", "image": "x", "ports": [{"containerPort": 70000}]}, "containerPort"),
        ("bad-name", {"name": "Trainer_1", "image": "x"}, "Trainer_1"),
        ("cpu-requests-above-limits",
         {"name": "trainer", "image": "x",
          "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "1"}, "requests": {"cpu": "2"}}}, "cpu"),
        ("env-value-object", {"name": "trainer", "image": "x", "env": [{"name": "A", "value": {"x": 1}}]}, "env"),
    ],
    ids=["port-70000", "container-name-not-dns", "cpu-requests-above-limits", "env-value-an-object"],
)  # fmt: skip
def test_pods_the_api_server_refuses_end_the_job_invalid_with_its_words(
    jobs: Jobs, name: str, container: dict[str, Any], words: str
) -> None:
    manifest = training_job(name, NS, gpusPerWorker=8)
    manifest["spec"]["template"] = {"spec": {"containers": [container]}}
    jobs.apply(manifest)
    condition = jobs.wait(
        "Invalid condition", lambda: (c := jobs.condition(name, "Invalid")) and c["status"] == "True" and c, 90
    )
    assert condition["reason"] == "PodRefused" and condition["observedGeneration"] == 1
    assert "the API server refused" in condition["message"] and words in condition["message"]
    # The GPUs are given back, nothing is left behind, and the operator does not try again.
    status = jobs.wait("placement cleared", lambda: (s := jobs.status(name)).get("phase") == "Pending" and s, 30)
    assert not (status.get("placement") or {}).get("workers")
    jobs.wait("no pods", lambda: jobs.pods(name) == [], 30)
    refusals = [e for e in jobs.events(name) if e.get("reason") == "PodRefused"]
    assert sum(int(e.get("count") or 1) for e in refusals) == 1
    jobs.delete(name, wait=True)
