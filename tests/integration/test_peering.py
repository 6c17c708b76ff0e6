"""Two operator replicas with kopf peering: one acts at a time, and the other takes over when it dies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gputopo.sandbox.harness import Jobs, OperatorProcess, namespace_jobs, training_job, wait_for
from gputopo.sandbox.testing import SandboxHandle

NS = "peering-test"
LOOP = "control loop started"


def replica(sandbox: SandboxHandle, log: Path, identity: str, priority: int) -> OperatorProcess:
    return OperatorProcess(
        sandbox.kubeconfig,
        log,
        {
            "GPUTOPO_NAMESPACES": NS,
            "GPUTOPO_OPERATOR_NAMESPACE": NS,
            "GPUTOPO_IDENTITY": identity,
            "GPUTOPO_PRIORITY": str(priority),
            "GPUTOPO_PEERING_LIFETIME_SECONDS": "5",
            "GPUTOPO_METRICS_PORT": "0",
            "GPUTOPO_LIVENESS_PORT": "0",
            "GPUTOPO_LOG_FORMAT": "plain",
        },
    )


def loops(proc: OperatorProcess) -> int:
    try:
        return proc.log_file.read_text(errors="replace").count(LOOP)
    except OSError:
        return 0


@pytest.fixture(scope="module")
def replicas(sandbox: SandboxHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[OperatorProcess]]:
    sandbox.kubectl("create", "namespace", NS, check=False)
    logs = tmp_path_factory.mktemp("peering")
    procs = [
        replica(sandbox, logs / "leader.log", "leader", 200),
        replica(sandbox, logs / "standby.log", "standby", 100),
    ]
    for proc in procs:
        proc.start()
    yield procs
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    for proc in procs:
        proc.stop()


@pytest.fixture
def jobs(sandbox: SandboxHandle, replicas: list[OperatorProcess]) -> Iterator[Jobs]:
    standby = replicas[1]
    with namespace_jobs(sandbox.kubectl, NS, standby) as handle:
        yield handle


def test_one_replica_acts_and_the_other_takes_over(jobs: Jobs, replicas: list[OperatorProcess]) -> None:
    leader, standby = replicas
    wait_for("the leader's control loop", lambda: loops(leader) == 1, timeout=90)
    jobs.apply(training_job("first", NS, workers=2, gpusPerWorker=8))
    pods = jobs.wait_running_pods("first", 2, timeout=90)
    assert sorted(p["metadata"]["name"] for p in pods) == ["first-0", "first-1"]
    assert loops(standby) == 0, "the standby ran its control loop while the leader led"
    # The phase is the leader's report, which may follow the pods by a few seconds (memory.REPORT_DELAY_SECONDS
    # holds reports while new plans go out, and a report is looked at again after the binding's second).
    jobs.wait_phase("first", "Running", timeout=30)

    leader.kill()  # no goodbye: the standby must notice the leader's silence
    wait_for("the standby's control loop", lambda: loops(standby) == 1, timeout=60)
    jobs.apply(training_job("second", NS, workers=1, gpusPerWorker=8))
    jobs.wait_running_pods("second", 1, timeout=90)
    assert len(jobs.pods("first")) == 2 and jobs.status("first")["phase"] == "Running"  # adopted, not recreated
    assert jobs.status("first").get("restarts", 0) == 0
