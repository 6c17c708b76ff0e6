"""The operator as integration tests and benchmarks drive it: a real process against a real API server.

``OperatorProcess`` starts ``python -m gputopo.controller.main`` with its settings in the environment,
and can stop it gracefully or kill it (to test a crash mid-placement). ``Jobs`` applies TrainingJobs and
polls them with deadlines, through ``kubectl`` so nothing here shares the operator's client. ``wait_for``
is the one poll-until-deadline loop of the tests (the sandbox's test handle uses it too).
``namespaced_operator`` and ``namespace_jobs`` are the bodies of the integration tests' fixtures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gputopo.errors import GputopoError
from gputopo.sandbox.admission import enable_gating

__all__ = [
    "Jobs",
    "OperatorProcess",
    "WaitTimeoutError",
    "namespace_jobs",
    "namespaced_operator",
    "priority_classes",
    "training_job",
    "wait_for",
]

Kubectl = Callable[..., str]

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "pytorch"}]}}


class WaitTimeoutError(GputopoError, AssertionError):
    """A condition a test waited for did not come true before its deadline."""


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    raise WaitTimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def training_job(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gputopo.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workers": 1, "gpusPerWorker": 8, "template": TEMPLATE, **spec},
    }


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log_file: Path, env: Mapping[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_file = log_file
        self.env = dict(env or {})
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.running:
            return
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.env}
        log = self.log_file.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gputopo.controller.main"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies under the operator."""
        self._signal(signal.SIGKILL, 5.0)

    def _signal(self, sig: int, timeout: float) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(sig)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Jobs:
    """TrainingJobs of one namespace, through kubectl."""

    def __init__(self, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace

    def apply(self, manifest: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-n", self.namespace, "-f", "-", input=json.dumps(manifest))

    def get(self, name: str) -> dict[str, Any] | None:
        out = self.kubectl("get", "trainingjob", name, "-n", self.namespace, "-o", "json", check=False)
        try:
            value: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError:
            return None
        return value

    def status(self, name: str) -> dict[str, Any]:
        return (self.get(name) or {}).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == type_), None)

    def pods(self, name: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-n", self.namespace, "-l", f"gputopo.io/job={name}", "-o", "json")
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def all_pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self.kubectl("get", "pods", "-n", self.namespace, "-o", "json"))[
            "items"
        ]
        return items

    def events(self, name: str) -> list[dict[str, Any]]:
        out = self.kubectl(
            "get", "events", "-n", self.namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def finish_pod(self, pod: str, phase: str = "Succeeded") -> None:
        """What a worker's exit would do (kwok runs no containers)."""
        patch = {"status": {"phase": phase}}
        self.kubectl(
            "patch", "pod", pod, "-n", self.namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )

    def delete(self, name: str, wait: bool = False) -> None:
        self.kubectl(
            "delete", "trainingjob", name, "-n", self.namespace, "--ignore-not-found", f"--wait={str(wait).lower()}"
        )

    def delete_all(self) -> None:
        self.kubectl("delete", "trainingjobs", "--all", "-n", self.namespace, "--wait=false", check=False)
        self.kubectl(
            "delete", "pods", "--all", "-n", self.namespace, "--grace-period=0", "--force", "--wait=false", check=False
        )

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
        return wait_for(what, predicate, timeout, every)

    def wait_phase(self, name: str, *phases: str, timeout: float = 60.0) -> dict[str, Any]:
        result: dict[str, Any] = self.wait(
            f"{name} in phase {'/'.join(phases)}",
            lambda: (s := self.status(name)).get("phase") in phases and s,
            timeout,
        )
        return result

    def wait_running_pods(self, name: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods(name) if not p["metadata"].get("deletionTimestamp")]
            bound = [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
            return bound if len(bound) == count and len(pods) == count else None

        result: list[dict[str, Any]] = self.wait(f"{count} running pods of {name}", ready, timeout)
        return result


@contextmanager
def namespaced_operator(
    kubectl: Kubectl,
    kubeconfig: Path,
    log_file: Path,
    namespace: str,
    settings: Mapping[str, str],
    *,
    gated: bool = True,
) -> Iterator[OperatorProcess]:
    """An operator that watches only ``namespace`` (created here, and opted into the chart's gating unless not
    ``gated``), named after it, with no metrics or liveness port and plain logs, plus ``settings``. On exit the
    namespace is deleted, then the operator stops.
    """
    kubectl("create", "namespace", namespace, check=False)
    if gated:
        enable_gating(kubectl, namespace)
    proc = OperatorProcess(
        kubeconfig,
        log_file,
        {
            "GPUTOPO_NAMESPACES": namespace,
            "GPUTOPO_OPERATOR_NAMESPACE": namespace,
            "GPUTOPO_IDENTITY": namespace,
            "GPUTOPO_METRICS_PORT": "0",
            "GPUTOPO_LIVENESS_PORT": "0",
            "GPUTOPO_LOG_FORMAT": "plain",
            **settings,
        },
    )
    proc.start()
    yield proc
    # Delete while the operator runs: it releases its ConfigMap's daemon (and finalizer) as it goes.
    kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    proc.stop()


@contextmanager
def priority_classes(kubectl: Kubectl, classes: Mapping[str, int]) -> Iterator[None]:
    """The PriorityClasses ``classes`` (name: value) applied for the block, deleted after it."""
    items = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in classes.items()
    ]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    yield
    kubectl("delete", "priorityclass", *classes, "--ignore-not-found", check=False)


@contextmanager
def namespace_jobs(kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> Iterator[Jobs]:
    """The TrainingJobs of ``namespace``; on exit all of them and their pods are gone and the operator still runs."""
    handle = Jobs(kubectl, namespace)
    yield handle
    handle.delete_all()
    handle.wait("namespace emptied of pods", lambda: not handle.all_pods(), timeout=60)
    assert operator.running, operator.log_tail()
