"""The sandbox restarts kube-scheduler and kube-controller-manager after they lose leader election.

Its own small sandbox (the session's is shared by the other tests): the real kube-apiserver is stopped long
enough for both components' leases to lapse (renew deadline 10 s), then started again with kwokctl's own
command; both components exit, the supervisor starts them again, and a pod is scheduled afterwards.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputopo.sandbox import Sandbox, processes
from gputopo.sandbox.harness import wait_for
from gputopo.sandbox.supervisor import Component, components, start_component

NAME = os.environ.get("GPUTOPO_TEST_SANDBOX", "gputopo-test") + "-restart"


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    sandbox = Sandbox(NAME)
    sandbox.up(nodes=1, profile="hgx-h100", probes=False)
    try:
        yield sandbox
    finally:
        sandbox.down()


def _pid(path: Path) -> int:
    """The pid kwokctl (or the supervisor) recorded; -1 while the file is being rewritten."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -1


def _bound(box: Sandbox, pod: str) -> bool:
    out = box.kubectl("get", "pod", pod, "-n", "default", "-o", "json", check=False)
    return bool(out) and bool(json.loads(out).get("spec", {}).get("nodeName"))


def _restarted(supervised: dict[str, Component], before: dict[str, int]) -> bool:
    return all(_pid(c.pid_file) != before[n] and processes.alive(c.pid_file) for n, c in supervised.items())


def _leading(box: Sandbox, name: str) -> bool:
    """Whether ``name`` holds its lease: only a leader exits when it cannot renew; one still acquiring waits."""
    out = box.kubectl("get", "lease", name, "-n", "kube-system", "-o", "json", check=False)
    return bool(out) and bool(json.loads(out).get("spec", {}).get("holderIdentity"))


def test_scheduler_and_controller_manager_come_back_after_an_api_server_restart(box: Sandbox) -> None:
    supervised = {c.name: c for c in components(box.cluster_dir)}
    assert set(supervised) == {"kube-scheduler", "kube-controller-manager"}
    wait_for("both components to lead", lambda: all(_leading(box, n) for n in supervised), 90, every=1.0)
    before = {name: _pid(c.pid_file) for name, c in supervised.items()}
    (apiserver,) = components(box.cluster_dir, ("kube-apiserver",))

    os.kill(_pid(apiserver.pid_file), signal.SIGKILL)  # as a crash or a node reboot would
    wait_for("kube-apiserver stopped", lambda: not processes.alive(apiserver.pid_file), 30)
    # Each lease lapses: a component that cannot renew within its deadline (10 s) exits.
    wait_for(
        "scheduler and controller manager to lose leader election",
        lambda: all(not processes.alive(c.pid_file) or _pid(c.pid_file) != before[n] for n, c in supervised.items()),
        60,
    )
    start_component(apiserver)
    wait_for("the API server back", box.api_ready, 60, every=1.0)
    wait_for("both components running again under new pids", lambda: _restarted(supervised, before), 90, every=1.0)

    log = (box.log_dir / "supervisor.log").read_text()
    assert "kube-scheduler started again" in log and "kube-controller-manager started again" in log
    # The controller manager that came back runs its controllers (the service account one), and the
    # scheduler that came back binds pods.
    wait_for(
        "the default service account",
        lambda: box.kubectl("get", "serviceaccount", "default", "-n", "default", check=False),
        90,
        every=1.0,
    )
    node = box.node_names()[0]
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-restart", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}], "nodeSelector": {"kubernetes.io/hostname": node},
                 "tolerations": [{"operator": "Exists"}]},
    }  # fmt: skip
    box.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_for("the pod bound by the restarted scheduler", lambda: _bound(box, "after-restart"), 60, every=1.0)
