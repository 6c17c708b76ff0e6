"""Kueue's manager beside a sandbox: its objects installed, the process started from the pinned build, ready.

The manager runs as in its release, with its own certificates (``internalCertManagement``): it makes a CA and a
serving certificate for its webhook Service's name, keeps them in the Secret ``kueue-webhook-server-cert`` and
injects the CA into its webhook configurations and the conversion webhooks of its CRDs. Where a kubelet would
mount that Secret into the manager's pod, the sandbox writes its files into the manager's certificate
directory. Leader election is off; the visibility server (an aggregated API the sandbox does not register) too.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gputopo.sandbox import processes
from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.kueue_install import (
    KUEUE_NAMESPACE,
    WEBHOOK_SECRET,
    WEBHOOK_SERVICE,
    KueueInstall,
    control_objects,
    crd_documents,
    find_kueue,
    webhook_configurations,
)

__all__ = ["FRAMEWORKS", "KueueManager", "KueuePorts", "manager_configuration"]

Kubectl = Callable[..., str]

# The integrations the manager runs: Jobs and plain pods, and the gang sources gputopo reads (JobSet,
# LeaderWorkerSet, PyTorchJob); one whose CRD is not installed waits until it is.
FRAMEWORKS = (
    "batch/job",
    "pod",
    "jobset.x-k8s.io/jobset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "kubeflow.org/pytorchjob",
)
_CERT_FILES = ("tls.crt", "tls.key")


@dataclass(frozen=True)
class KueuePorts:
    """The manager's loopback ports: webhooks (HTTPS), health probes and metrics (HTTPS)."""

    webhook: int
    health: int
    metrics: int

    @classmethod
    def free(cls) -> KueuePorts:
        webhook, health, metrics = processes.free_ports(3)
        return cls(webhook, health, metrics)


def manager_configuration(ports: KueuePorts, cert_dir: Path) -> dict[str, Any]:
    """The manager's ``config.kueue.x-k8s.io/v1beta2`` Configuration for the sandbox."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        # Kueue's own defaults (20, 30) throttle its writes when hundreds of Workloads arrive at once: the 200-job
        # trace of bench_kueue.py ran under Kueue's TAS in 29 s at 50 / 100, in 15 s at these.
        "clientConnection": {"qps": 500, "burst": 1000},
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


class KueueManager:
    """The Kueue manager of one sandbox; its files live under ``<sandbox>/kueue``."""

    def __init__(self, sandbox_dir: Path, kubeconfig: Path, kubectl: Kubectl) -> None:
        self.dir = sandbox_dir / "kueue"
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.pid_file = sandbox_dir / "pids" / "kueue.pid"
        self.log_file = sandbox_dir / "logs" / "kueue.log"
        self.config_file = self.dir / "config.yaml"
        self.cert_dir = self.dir / "certs"
        self.ports_file = self.dir / "ports.json"

    @property
    def running(self) -> bool:
        return processes.alive(self.pid_file)

    def ports(self) -> KueuePorts | None:
        try:
            return KueuePorts(**json.loads(self.ports_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def install(self, install: KueueInstall, ports: KueuePorts) -> None:
        """Kueue's CRDs, namespace, Secret, webhook Service and webhook configurations, for ``ports``."""
        crds = crd_documents(install, ports.webhook)
        self._apply(crds, server_side=True)
        names = [f"crd/{crd['metadata']['name']}" for crd in crds]
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", *names)
        namespace, secret, service = control_objects()
        self._apply([namespace, service])
        # Created once and never applied again: the manager keeps its certificates in it.
        if not self.kubectl("get", "secret", WEBHOOK_SECRET, "-n", KUEUE_NAMESPACE, "--ignore-not-found", "-o", "name"):
            self.kubectl("create", "-f", "-", input=json.dumps(secret))
        self._apply(webhook_configurations(install, ports.webhook), server_side=True)

    def _apply(self, objects: list[dict[str, Any]], *, server_side: bool = False) -> None:
        args = ["apply", "--server-side", "--force-conflicts"] if server_side else ["apply"]
        self.kubectl(*args, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    def start(self, *, timeout: float) -> KueuePorts:
        """Install Kueue's objects, start the manager and wait until it is ready; a running one is kept."""
        if self.running and (ports := self.ports()) is not None:
            self.wait_ready(ports, timeout=timeout)
            return ports
        install = find_kueue()
        ports = KueuePorts.free()
        self.install(install, ports)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        # Files of an earlier cluster would be served at once, with a CA this cluster's webhooks do not trust.
        for name in _CERT_FILES:
            (self.cert_dir / name).unlink(missing_ok=True)
        self.config_file.write_text(yaml.safe_dump(manager_configuration(ports, self.cert_dir), sort_keys=False))
        self.ports_file.write_text(json.dumps(ports.__dict__))
        argv = [str(install.manager), f"--config={self.config_file}", f"--kubeconfig={self.kubeconfig}"]
        processes.start(argv, pid_file=self.pid_file, log_file=self.log_file)
        self.wait_ready(ports, timeout=timeout)
        return ports

    def wait_ready(self, ports: KueuePorts, *, timeout: float) -> None:
        """Until the manager's readyz answers (its certificates are in place and its webhook server listens);
        meanwhile the certificates of its Secret are written where it reads them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                last = processes.last_line(self.log_file)
                raise SandboxError(f"the Kueue manager exited: {last} (see {self.log_file})")
            self._mount_certificates()
            if processes.answers(f"http://127.0.0.1:{ports.health}/readyz"):
                return
            time.sleep(0.25)
        raise SandboxError(
            f"the Kueue manager was not ready on :{ports.health}/readyz within {timeout:.0f} s; see {self.log_file}"
        )

    def _mount_certificates(self) -> None:
        """The Secret's certificate and key in the certificate directory, as a Secret volume would hold them."""
        out = self.kubectl(
            "get", "secret", WEBHOOK_SECRET, "-n", KUEUE_NAMESPACE, "-o", "json", "--ignore-not-found", check=False
        )
        data = (json.loads(out).get("data") or {}) if out.strip().startswith("{") else {}
        if not all(data.get(name) for name in _CERT_FILES):
            return
        for name in _CERT_FILES:
            content = base64.b64decode(data[name])
            path = self.cert_dir / name
            if not path.is_file() or path.read_bytes() != content:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(content)
                tmp.chmod(0o600)
                tmp.replace(path)

    def stop(self) -> bool:
        return processes.stop(self.pid_file)
