"""The sandbox: a real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
started by kwokctl's binary runtime from the pinned binaries, with kwok-simulated GPU nodes, the CRDs,
fake node probes publishing NodeTopology, optionally the operator with the chart's placement-gate admission
policy (``gputopo.sandbox.admission``), and optionally Kueue's manager with queues for the sandbox's GPUs
(``gputopo.sandbox.kueue``, ``gputopo.sandbox.kueue_queues``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gputopo.api import crdgen
from gputopo.api.group import DRA_DEVICE_CLASS, DRA_DRIVER
from gputopo.sandbox import processes
from gputopo.sandbox.admission import install_gate_policy, render_gate_policy
from gputopo.sandbox.binaries import KUBE_VERSION, Binaries, cache_root, find_binaries
from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.kueue import KueueManager
from gputopo.sandbox.kueue_install import find_kueue
from gputopo.sandbox.kueue_queues import GPU_NODE_LABELS, capacity_quota, sandbox_queues
from gputopo.sandbox.nodes import KWOK_ANNOTATION, node_manifest
from gputopo.sandbox.profiles import NodePlan, domain_fabric, plan_nodes

__all__ = ["DEFAULT_NAME", "FAKE_ALLOCATIONS", "Sandbox", "SandboxStatus"]

DEFAULT_NAME = "gputopo"
# The fake probes' pod GPUs (gputopo-probe --fake-allocation): the plan, or the device plugin's choice.
FAKE_ALLOCATIONS = ("plan", "device-plugin")
# Bound pods kwok starts at once (its default is 4 for all nodes).
KWOK_POD_PARALLELISM = 32
# The Workload API (scheduling.k8s.io/v1beta1 Workloads and PodGroups), off by default in 1.37: GenericWorkload
# serves it and turns on the scheduler's GangScheduling plugin, WorkloadWithJob has the Job controller make a
# Workload and a PodGroup for each new Job, TopologyAwareWorkloadScheduling adds the scheduler's placement of a
# whole PodGroup. kwokctl hands the gates to kube-apiserver, kube-controller-manager and kube-scheduler alike,
# and the runtime config to kube-apiserver (the beta version is not served by default).
KUBE_FEATURE_GATES = {"GenericWorkload": True, "WorkloadWithJob": True, "TopologyAwareWorkloadScheduling": True}
KUBE_RUNTIME_CONFIG = {"scheduling.k8s.io/v1beta1": True}

# NVIDIA's DRA driver installs this DeviceClass of whole GPUs (its Helm chart's deviceclass-gpu.yaml).
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRA_DEVICE_CLASS},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'gpu'"
                }
            }
        ]
    },
}


@dataclass
class SandboxStatus:
    name: str
    running: bool
    kubeconfig: Path
    nodes: list[str] = field(default_factory=list)
    profile: str = ""
    probes: bool = False
    operator: bool = False
    kueue: bool = False
    server: str = ""


def _key_values(flags: dict[str, bool]) -> str:
    """A component flag's ``key=value,...`` form (--feature-gates, --runtime-config)."""
    return ",".join(f"{key}={str(value).lower()}" for key, value in flags.items())


def _log(message: str) -> None:
    print(f"[sandbox] {message}", file=sys.stderr, flush=True)


class Sandbox:
    """One named local cluster; its files live under ``~/.cache/gputopo/sandbox/<name>``."""

    def __init__(self, name: str = DEFAULT_NAME, root: Path | None = None) -> None:
        self.name = name
        self.dir = (root or cache_root() / "sandbox") / name
        self.kubeconfig = self.dir / "kubeconfig"
        self.fault_dir = self.dir / "faults"
        self.nodes_file = self.dir / "nodes.yaml"
        self.state_file = self.dir / "state.json"
        self.log_dir = self.dir / "logs"
        self._bins: Binaries | None = None

    # -- plumbing -------------------------------------------------------------------------------------------

    @property
    def bins(self) -> Binaries:
        if self._bins is None:
            self._bins = find_binaries()
        return self._bins

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KWOK_WORKDIR": str(self.dir / "kwok"), "KUBECONFIG": str(self.kubeconfig)}

    def _kwokctl(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bins.path("kwokctl")), "--name", self.name, *args]
        proc = subprocess.run(argv, env=self._env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SandboxError(f"kwokctl {' '.join(args)} failed:\n{proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        argv = [str(self.bins.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SandboxError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self, **values: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({**self._state(), **values}, indent=2))

    def _pid_file(self, what: str) -> Path:
        return self.dir / "pids" / f"{what}.pid"

    def api_ready(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        try:
            self.kubectl("get", "--raw", "/readyz", timeout=10)
        except (SandboxError, subprocess.TimeoutExpired):
            return False
        return True

    # -- lifecycle ------------------------------------------------------------------------------------------

    def up(
        self,
        *,
        nodes: int = 8,
        profile: str = "mixed",
        probes: bool = True,
        operator: bool = False,
        probe_interval: float = 1.0,
        wait: float = 180.0,
        gpu_allocation: str = "devicePlugin",
        fake_allocation: str = "plan",
        kueue: bool = False,
    ) -> SandboxStatus:
        """Start (or reuse) the cluster with ``nodes`` simulated GPU nodes of ``profile``.

        ``fake_allocation`` is which GPUs the fake probes report a pod holding: ``plan`` (the operator's
        planned GPUs when free, as if the cluster honoured the plan) or ``device-plugin`` (the choice of NVIDIA's
        device plugin, ``gputopo.topology.device_plugin``, ignoring the plan as the real kubelet does).

        With ``gpu_allocation="dra"`` the fake probes also publish each node's GPUs as ResourceSlices the way
        NVIDIA's DRA driver does, its DeviceClass ``gpu.nvidia.com`` is created, and the operator started here
        runs in that mode.

        With ``kueue`` Kueue's manager runs beside it, from the build of ``hack/build-kueue.sh``, with a
        ResourceFlavor, ClusterQueue and LocalQueue (in ``default``) for gputopo-placed work and another set on a
        Topology of the sandbox's switch tiers for Kueue's own Topology-Aware Scheduling
        (``gputopo.sandbox.kueue_queues``).
        """
        if gpu_allocation not in ("devicePlugin", "dra"):
            raise SandboxError(f"gpu allocation must be devicePlugin or dra, not {gpu_allocation!r}")
        if fake_allocation not in FAKE_ALLOCATIONS:
            raise SandboxError(f"fake allocation must be one of {', '.join(FAKE_ALLOCATIONS)}, not {fake_allocation!r}")
        plans = plan_nodes(profile, nodes)
        if kueue:
            find_kueue()  # a missing build is said before any cluster starts
        state = self._state()
        if self.api_ready():
            recorded = state.get("nodes") is not None
            shape = (
                state.get("nodes"),
                state.get("profile"),
                state.get("gpu_allocation", "devicePlugin"),
                state.get("fake_allocation", "plan"),
            )
            if recorded and shape != (nodes, profile, gpu_allocation, fake_allocation):
                raise SandboxError(
                    f"sandbox {self.name!r} is already up with {state.get('nodes')} nodes of profile "
                    f"{state.get('profile')!r}, gpu allocation {shape[2]}, fake allocation {shape[3]}; run "
                    "`gputopo sandbox down` first, or call up with the same --nodes, --profile, --gpu-allocation "
                    "and --fake-allocation to reuse it"
                )
            _log(f"reusing running sandbox {self.name!r} ({nodes} nodes, profile {profile})")
        else:
            self._start_cluster()
        self.start_supervisor()
        self._install_crds()
        if gpu_allocation == "dra":
            self.kubectl("apply", "-f", "-", input=json.dumps(DEVICE_CLASS))
        self._create_nodes(plans)
        self._save_state(
            nodes=nodes,
            profile=profile,
            node_names=[p.name for p in plans],
            gpu_allocation=gpu_allocation,
            fake_allocation=fake_allocation,
        )
        if probes:
            self.start_probes(plans, interval=probe_interval)
            self.wait_for_topologies([p.name for p in plans], timeout=wait)
        if kueue:
            self.start_kueue(timeout=wait)
        if operator:
            self.install_gate_policy(timeout=wait)
            self.start_operator()
            self.wait_for_operator(timeout=wait)
        _log(f"ready: export KUBECONFIG={self.kubeconfig}")
        return self.status()

    def _start_cluster(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        existing = self._kwokctl("get", "clusters", check=False).stdout.split()
        if self.name in existing:
            _log(f"starting stopped cluster {self.name!r}")
            self._kwokctl("start", "cluster", "--wait", "3m")
            return
        config = self.dir / "kwokctl.yaml"
        config.write_text(yaml.safe_dump_all(self._kwokctl_config(), sort_keys=False))
        _log(f"creating cluster {self.name!r} (Kubernetes {KUBE_VERSION}, binary runtime) ...")
        t0 = time.monotonic()
        self._kwokctl(
            "create", "cluster", "--runtime", "binary", "-c", str(config),
            "--kubeconfig", str(self.kubeconfig), "--wait", "3m", "--quiet-pull",
        )  # fmt: skip
        _log(f"control plane up in {time.monotonic() - t0:.1f} s")

    def _kwokctl_config(self) -> list[dict[str, Any]]:
        b = self.bins
        cluster = {
            "kind": "KwokctlConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": {
                "runtime": "binary",
                "kubeVersion": KUBE_VERSION,
                "securePort": True,
                "kubeAuthorization": True,
                "kubeAdmission": True,
                "disableQPSLimits": True,
                "kubeFeatureGates": _key_values(KUBE_FEATURE_GATES),
                "kubeRuntimeConfig": _key_values(KUBE_RUNTIME_CONFIG),
                "etcdBinary": str(b.path("etcd")),
                "kubeApiserverBinary": str(b.path("kube-apiserver")),
                "kubeControllerManagerBinary": str(b.path("kube-controller-manager")),
                "kubeSchedulerBinary": str(b.path("kube-scheduler")),
                "kubectlBinary": str(b.kubectl),
                "kwokControllerBinary": str(b.path("kwok")),
            },
            # kube-controller-manager keeps kwokctl's node-monitor grace period (200 s, its heartbeat factor
            # of 5 on 40 s): kwok renews each node's Lease only every 50 s (a quarter of its 200 s duration),
            # so a shorter grace marks every node Unknown and taints it between two renewals, and kwok then
            # writes each one Ready again. A node fault needs no grace: it writes Ready False itself.
            "componentsPatches": [
                {
                    # kwok manages only nodes carrying its annotation, so a node fault can take the
                    # simulated kubelet away from one node (see sandbox.faults).
                    "name": "kwok-controller",
                    "extraArgs": [
                        {"key": "manage-all-nodes", "value": "false", "override": True},
                        {"key": "manage-nodes-with-annotation-selector", "value": f"{KWOK_ANNOTATION}=fake"},
                    ],
                },
            ],
        }
        # kwok starts bound pods with 4 workers for all its nodes by default, where each real kubelet starts
        # its own pods: under load the 4 fall behind (a backlog of seconds in a burst of 300 pods). kwokctl
        # hands this document to kwok as it is, not defaulted: the other options are kwok's own defaults.
        simulator = {
            "kind": "KwokConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": {
                "podPlayStageParallelism": KWOK_POD_PARALLELISM,
                "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
                "enableDebuggingHandlers": True,
                "enableProfilingHandler": True,
                "enablePodsOnNodeSyncListPager": True,
            },
        }
        return [cluster, simulator]

    def _crd_documents(self) -> str:
        docs = [crdgen.render(crd) for crd in crdgen.crds().values()]
        for parent in Path(__file__).resolve().parents:
            extra = parent / "crds" / "kopf-peering.yaml"
            if extra.is_file():
                docs.append(extra.read_text())
                break
        return "\n---\n".join(docs)

    def _install_crds(self) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=self._crd_documents())
        self.kubectl(
            "wait", "--for", "condition=Established", "--timeout", "60s",
            "crd/trainingjobs.gputopo.io", "crd/gangplacements.gputopo.io", "crd/nodetopologies.gputopo.io",
            "crd/nodepodgpus.gputopo.io",
        )  # fmt: skip

    def _create_nodes(self, plans: Sequence[NodePlan]) -> None:
        from gputopo_probe.errors import ProbeError
        from gputopo_probe.source import load_fake_topology

        manifests = []
        farm: list[dict[str, Any]] = []
        for plan in plans:
            try:
                topology = load_fake_topology(plan.node_type)
            except ProbeError as error:
                raise SandboxError(str(error)) from error
            manifests.append(node_manifest(plan, topology.gpu_count, topology.gpu_model))
            entry: dict[str, Any] = {
                "node": plan.name,
                "topology": plan.node_type,
                "gpuModel": topology.gpu_model or None,
            }
            if plan.nvlink_domain:
                cluster_uuid, clique = domain_fabric(plan.nvlink_domain)
                entry["fabric"] = {"clusterUuid": cluster_uuid, "cliqueId": clique, "domain": plan.nvlink_domain}
            farm.append(entry)
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": manifests}))
        self.nodes_file.write_text(yaml.safe_dump({"nodes": farm}, sort_keys=False))
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        _log(f"{len(plans)} simulated GPU nodes registered")

    @property
    def cluster_dir(self) -> Path:
        """kwokctl's directory of this cluster: its resolved configuration, pid files and logs."""
        return self.dir / "kwok" / "clusters" / self.name

    def start_supervisor(self) -> None:
        """Keep kube-scheduler and kube-controller-manager running (``gputopo.sandbox.supervisor``)."""
        pid_file = self._pid_file("supervisor")
        if processes.alive(pid_file):
            return
        argv = [sys.executable, "-m", "gputopo.sandbox.supervisor", "--cluster-dir", str(self.cluster_dir)]
        processes.start(argv, pid_file=pid_file, log_file=self.log_dir / "supervisor.log")
        _log(f"control-plane supervisor started (log: {self.log_dir / 'supervisor.log'})")

    def start_probes(self, plans: Sequence[NodePlan] | None = None, *, interval: float = 1.0) -> None:
        pid_file = self._pid_file("probe-farm")
        if processes.alive(pid_file):
            return
        argv = [
            sys.executable, "-m", "gputopo_probe.main", "farm",
            "--nodes-file", str(self.nodes_file), "--kubeconfig", str(self.kubeconfig),
            "--fault-dir", str(self.fault_dir), "--interval", str(interval), "--listen", "off",
        ]  # fmt: skip
        if self.gpu_allocation == "dra":
            argv.append("--dra")
        argv += ["--fake-allocation", str(self._state().get("fake_allocation", "plan"))]
        # The sandbox is a test cluster: its fake probes may publish (gputopo_probe.testcluster).
        env = {"GPUTOPO_PROBE_TEST_CLUSTER": "true"}
        processes.start(argv, pid_file=pid_file, log_file=self.log_dir / "probe-farm.log", env=env)
        _log(f"fake node probes started (log: {self.log_dir / 'probe-farm.log'})")

    @property
    def operator_namespace(self) -> str:
        """The namespace of the operator started here (its ConfigMap's), which the chart calls the release's."""
        return os.environ.get("GPUTOPO_OPERATOR_NAMESPACE") or "default"

    def install_gate_policy(self, *, timeout: float) -> None:
        """The chart's placement-gate MutatingAdmissionPolicy and binding (``gputopo.sandbox.admission``), rendered
        for a release in the operator's namespace, so that the operator started here places foreign gangs whole."""
        docs = render_gate_policy(self.bins.helm, self.operator_namespace)
        install_gate_policy(self.kubectl, docs, timeout=timeout)
        _log(f"placement-gate admission policy {docs[0]['metadata']['name']!r} installed")

    def start_operator(self, extra_env: dict[str, str] | None = None) -> None:
        """Start the operator with metrics and liveness ports of its own (another sandbox's operator, the
        demo's say, may hold the defaults); ``extra_env`` overrides its settings, those ports included."""
        pid_file = self._pid_file("operator")
        if processes.alive(pid_file):
            return
        argv = [sys.executable, "-m", "gputopo.controller.main"]
        metrics, liveness = processes.free_ports(2)
        env = {
            "KUBECONFIG": str(self.kubeconfig),
            "GPUTOPO_GPU_ALLOCATION": self.gpu_allocation,
            "GPUTOPO_METRICS_PORT": str(metrics),
            "GPUTOPO_LIVENESS_PORT": str(liveness),
            **(extra_env or {}),
        }
        ports = {"metrics": int(env["GPUTOPO_METRICS_PORT"]), "liveness": int(env["GPUTOPO_LIVENESS_PORT"])}
        self._save_state(operator_ports=ports)
        log_file = self.log_dir / "operator.log"
        processes.start(argv, pid_file=pid_file, log_file=log_file, env=env)
        _log(f"operator started (metrics on :{ports['metrics']}, liveness on :{ports['liveness']}; log: {log_file})")

    def wait_for_operator(self, *, timeout: float) -> None:
        """Until the operator's liveness endpoint answers; a SandboxError with its last words if it exits first."""
        port = int(self._state().get("operator_ports", {}).get("liveness", 0))
        log_file = self.log_dir / "operator.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not processes.alive(self._pid_file("operator")):
                raise SandboxError(f"the operator exited: {processes.last_line(log_file)} (see {log_file})")
            if not port or processes.answers(f"http://127.0.0.1:{port}/healthz"):
                return
            time.sleep(0.25)
        raise SandboxError(f"the operator did not answer on :{port}/healthz within {timeout:.0f} s; see {log_file}")

    @property
    def kueue(self) -> KueueManager:
        """Kueue's manager beside this sandbox (running or not)."""
        return KueueManager(self.dir, self.kubeconfig, self.kubectl)

    def start_kueue(self, *, timeout: float) -> None:
        """Kueue's objects and manager (kept when it runs), then the sandbox's queues: quotas of all its GPU nodes."""
        t0 = time.monotonic()
        ports = self.kueue.start(timeout=timeout)
        selector = ",".join(f"{k}={v}" for k, v in GPU_NODE_LABELS.items())
        nodes = json.loads(self.kubectl("get", "nodes", "-l", selector, "-o", "json"))["items"]
        queues = sandbox_queues(capacity_quota(nodes))
        # The manager's webhooks see each of these: applying them also proves that the API server reaches them.
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": queues}))
        names = [f"clusterqueue/{q['metadata']['name']}" for q in queues if q["kind"] == "ClusterQueue"]
        self.kubectl("wait", "--for", "condition=Active", f"--timeout={max(1, int(timeout))}s", *names)
        self._save_state(kueue=True)
        _log(
            f"Kueue manager ready in {time.monotonic() - t0:.1f} s (webhooks on 127.0.0.1:{ports.webhook}; "
            f"log: {self.kueue.log_file})"
        )

    def stop_operator(self) -> bool:
        return processes.stop(self._pid_file("operator"))

    def wait_for_topologies(self, names: Sequence[str], *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        missing: set[str] = set(names)
        while time.monotonic() < deadline:
            out = self.kubectl("get", "nodetopologies", "-o", "jsonpath={.items[*].metadata.name}", check=False)
            missing = set(names) - set(out.split())
            if not missing:
                _log(f"NodeTopology published for all {len(names)} nodes")
                return
            if not processes.alive(self._pid_file("probe-farm")):
                raise SandboxError(f"the probe farm exited; see {self.log_dir / 'probe-farm.log'}")
            time.sleep(0.5)
        raise SandboxError(
            f"no NodeTopology after {timeout:.0f} s for {len(missing)} nodes (e.g. {sorted(missing)[:3]}); "
            f"see {self.log_dir / 'probe-farm.log'}"
        )

    @property
    def gpu_allocation(self) -> str:
        """devicePlugin or dra, as the last ``up`` set it."""
        return str(self._state().get("gpu_allocation", "devicePlugin"))

    def node_names(self) -> list[str]:
        """The simulated nodes the last ``up`` created (read from the state file, no API call)."""
        return list(self._state().get("node_names", []))

    def status(self) -> SandboxStatus:
        state = self._state()
        running = self.api_ready()
        server = ""
        if self.kubeconfig.exists():
            config = yaml.safe_load(self.kubeconfig.read_text()) or {}
            clusters = config.get("clusters") or [{}]
            server = str(clusters[0].get("cluster", {}).get("server", ""))
        return SandboxStatus(
            name=self.name,
            running=running,
            kubeconfig=self.kubeconfig,
            nodes=list(state.get("node_names", [])),
            profile=str(state.get("profile", "")),
            probes=processes.alive(self._pid_file("probe-farm")),
            operator=processes.alive(self._pid_file("operator")),
            kueue=self.kueue.running,
            server=server,
        )

    def down(self) -> None:
        for what in ("supervisor", "operator", "probe-farm", "kueue"):
            if processes.stop(self._pid_file(what)):
                _log(f"stopped {what}")
        if self.dir.exists():
            existing = self._kwokctl("get", "clusters", check=False).stdout.split()
            if self.name in existing:
                self._kwokctl("delete", "cluster")
                _log(f"deleted cluster {self.name!r}")
        self.state_file.unlink(missing_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        # A new sandbox starts with healthy hardware.
        shutil.rmtree(self.fault_dir, ignore_errors=True)
