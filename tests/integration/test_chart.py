"""The Helm chart against the sandbox's real kube-apiserver: its output is accepted by the server, it
installs and upgrades, bad values are refused with a clear message, RBAC gives each component only what it
needs, and the admission policy keeps the probe to its own node.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from chart_helpers import CHART, NS, OPERATOR, POLICY, PROBE, RELEASE, SANDBOX_VALUES, TEST_LABEL, find, helm, render
from kubernetes.client.exceptions import ApiException

from gputopo.sandbox.testing import SandboxHandle

# -- against the sandbox's API server --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    """The chart installed into the sandbox (taking over the CRDs the sandbox applied), uninstalled at the end."""
    out = helm(
        "upgrade", "--install", RELEASE, str(CHART), "-n", NS, "--create-namespace",
        "--take-ownership", "--force-conflicts", *SANDBOX_VALUES, kubeconfig=sandbox.kubeconfig,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    yield sandbox
    helm("uninstall", RELEASE, "-n", NS, "--wait", kubeconfig=sandbox.kubeconfig)
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    sandbox.kubectl("delete", "clusterkopfpeering", RELEASE, "--ignore-not-found", check=False)


def test_server_side_dry_run_accepts_the_rendered_chart(sandbox: SandboxHandle) -> None:
    ns = "gputopo-chart-dryrun"
    sandbox.kubectl("create", "namespace", ns, check=False)
    try:
        manifest = helm("template", "dryrun", str(CHART), "-n", ns, *SANDBOX_VALUES).stdout
        out = sandbox.kubectl(
            "apply", "--server-side", "--dry-run=server", "--force-conflicts", "--field-manager=chart-test",
            "-f", "-", input=manifest,
        )  # fmt: skip
    finally:
        sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    applied = {line.split()[0] for line in out.splitlines() if line.strip()}
    for kind in (
        "deployment.apps",
        "daemonset.apps",
        "validatingadmissionpolicy.admissionregistration.k8s.io",
        "mutatingadmissionpolicy.admissionregistration.k8s.io",
        "mutatingadmissionpolicybinding.admissionregistration.k8s.io",
        "customresourcedefinition.apiextensions.k8s.io",
        "clusterrole.rbac.authorization.k8s.io",
    ):
        assert any(a.startswith(kind + "/") for a in applied), f"{kind} missing from: {out}"


def test_operator_pod_passes_pod_security_restricted(sandbox: SandboxHandle) -> None:
    ns = "gputopo-chart-restricted"
    sandbox.kubectl("create", "namespace", ns, check=False)
    sandbox.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    try:
        template = find(render(namespace=ns), "Deployment")["spec"]["template"]
        spec = {**template["spec"], "serviceAccountName": "default"}
        spec.pop("affinity", None)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-psa", "namespace": ns}, "spec": spec}
        sandbox.wait_for(
            "the default ServiceAccount", lambda: sandbox.kubectl("get", "sa", "default", "-n", ns, check=False)
        )
        proc = subprocess.run(
            [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), "create", "--dry-run=server",
             "-f", "-"], input=json.dumps(pod), capture_output=True, text=True,
        )  # fmt: skip
    finally:
        sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "PodSecurity" not in proc.stderr, proc.stderr


def test_install_creates_the_objects(release: SandboxHandle) -> None:
    k = release.kubectl
    k("get", "deployment", OPERATOR, "-n", NS)
    k("get", "daemonset", PROBE, "-n", NS)
    k("get", "serviceaccount", OPERATOR, PROBE, "-n", NS)
    k("get", "configmap", OPERATOR, "-n", NS)
    k("get", "role,rolebinding", OPERATOR, "-n", NS)
    k("get", "clusterrole,clusterrolebinding", OPERATOR, PROBE)
    k("get", "validatingadmissionpolicy,validatingadmissionpolicybinding", POLICY)
    k("get", "mutatingadmissionpolicy,mutatingadmissionpolicybinding", f"{RELEASE}-placement-gate")
    k("get", "crd", "gangplacements.gputopo.io")
    k("get", "clusterkopfpeering", RELEASE)
    crd = release.get_json("crd", "trainingjobs.gputopo.io")
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_upgrade_rolls_the_settings_and_keeps_the_peering(release: SandboxHandle) -> None:
    def checksum() -> str:
        deploy = release.get_json("deployment", OPERATOR, "-n", NS)
        return str(deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    before, peering = checksum(), release.get_json("clusterkopfpeering", RELEASE)["metadata"]["uid"]
    out = helm(
        "upgrade", RELEASE, str(CHART), "-n", NS, *SANDBOX_VALUES, "--set", "operator.config.quarantineSeconds=90",
        kubeconfig=release.kubeconfig,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    cm = release.get_json("configmap", OPERATOR, "-n", NS)
    assert cm["data"]["GPUTOPO_QUARANTINE_SECONDS"] == "90"
    assert checksum() != before
    assert release.get_json("clusterkopfpeering", RELEASE)["metadata"]["uid"] == peering


def test_upgrade_with_a_bad_value_is_refused_and_changes_nothing(release: SandboxHandle) -> None:
    revision = json.loads(helm("status", RELEASE, "-n", NS, "-o", "json", kubeconfig=release.kubeconfig).stdout)
    out = helm(
        "upgrade", RELEASE, str(CHART), "-n", NS, *SANDBOX_VALUES, "--set", "operator.replicas=-1",
        kubeconfig=release.kubeconfig,
    )  # fmt: skip
    assert out.returncode != 0
    assert "/operator/replicas" in out.stderr and "minimum" in out.stderr, out.stderr
    after = json.loads(helm("status", RELEASE, "-n", NS, "-o", "json", kubeconfig=release.kubeconfig).stdout)
    assert after["version"] == revision["version"]


# -- RBAC: each ServiceAccount can do what it needs and nothing else ----------------------------------------------

OPERATOR_CAN = [
    ("watch-trainingjobs", "watch", "trainingjobs.gputopo.io", "", "-A"),
    ("patch-trainingjob-status", "patch", "trainingjobs.gputopo.io", "status", "-A"),
    ("list-nodetopologies", "list", "nodetopologies.gputopo.io", "", ""),
    ("watch-nodepodgpus", "watch", "nodepodgpus.gputopo.io", "", ""),
    ("create-pods", "create", "pods", "", "-A"),
    ("create-services", "create", "services", "", "-A"),
    ("post-events", "create", "events.events.k8s.io", "", "-A"),
    ("keep-peering", "patch", "clusterkopfpeerings.kopf.dev", "", ""),
    ("patch-pods", "patch", "pods", "", "-A"),
    ("evict-pods", "create", "pods", "eviction", "-A"),
    ("post-core-events", "create", "events", "", "-A"),
    ("patch-core-events", "patch", "events", "", "-A"),
    ("create-gangplacements", "create", "gangplacements.gputopo.io", "", "-A"),
    ("delete-gangplacements", "delete", "gangplacements.gputopo.io", "", "-A"),
    ("patch-gangplacement-status", "patch", "gangplacements.gputopo.io", "status", "-A"),
    ("watch-jobs", "watch", "jobs.batch", "", "-A"),
    ("scan-crds", "watch", "customresourcedefinitions.apiextensions.k8s.io", "", ""),
    ("own-configmap", "patch", "configmaps", "", NS),
    ("create-own-configmap", "create", "configmaps", "", NS),
    ("watch-configmaps-for-kopf", "watch", "configmaps", "", "-A"),
]
OPERATOR_CANNOT = [
    ("read-secrets", "get", "secrets", "", "-A"),
    ("write-jobs", "patch", "jobs.batch", "", "-A"),
    ("patch-pod-status", "patch", "pods", "status", "-A"),
    ("bind-pods", "create", "pods", "binding", "-A"),
    ("list-secrets-here", "list", "secrets", "", NS),
    ("write-nodes", "patch", "nodes", "", ""),
    ("write-nodetopologies", "patch", "nodetopologies.gputopo.io", "", ""),
    ("write-nodepodgpus", "patch", "nodepodgpus.gputopo.io", "status", ""),
    ("delete-trainingjobs", "delete", "trainingjobs.gputopo.io", "", "-A"),
    ("exec-into-pods", "create", "pods", "exec", "-A"),
    ("configmaps-elsewhere", "patch", "configmaps", "", "default"),
    ("create-configmaps-elsewhere", "create", "configmaps", "", "default"),
    ("create-deployments", "create", "deployments.apps", "", "-A"),
    ("grant-itself-more", "bind", "clusterroles.rbac.authorization.k8s.io", "", ""),
]
PROBE_CAN = [
    ("label-nodes", "patch", "nodes", "", ""),
    ("create-nodetopology", "create", "nodetopologies.gputopo.io", "", ""),
    ("patch-nodetopology-status", "patch", "nodetopologies.gputopo.io", "status", ""),
    ("create-nodepodgpus", "create", "nodepodgpus.gputopo.io", "", ""),
    ("patch-nodepodgpus-status", "patch", "nodepodgpus.gputopo.io", "status", ""),
    ("watch-pods", "watch", "pods", "", "-A"),
    ("post-events", "create", "events", "", "-A"),
]
PROBE_CANNOT = [
    ("read-secrets", "get", "secrets", "", "-A"),
    ("delete-nodes", "delete", "nodes", "", ""),
    ("taint-via-status", "patch", "nodes", "status", ""),
    ("delete-nodetopologies", "delete", "nodetopologies.gputopo.io", "", ""),
    ("delete-nodepodgpus", "delete", "nodepodgpus.gputopo.io", "", ""),
    ("create-pods", "create", "pods", "", "-A"),
    ("touch-trainingjobs", "patch", "trainingjobs.gputopo.io", "", "-A"),
    ("read-configmaps", "get", "configmaps", "", "-A"),
]


def can_i(sandbox: SandboxHandle, sa: str, verb: str, resource: str, sub: str, where: str) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{NS}:{sa}"]
    args += [f"--subresource={sub}"] if sub else []
    args += (["-A"] if where == "-A" else ["-n", where]) if where else []
    return sandbox.kubectl(*args, check=False).strip() == "yes"


RBAC = (
    [(f"operator-can-{c[0]}", OPERATOR, *c[1:], True) for c in OPERATOR_CAN]
    + [(f"operator-cannot-{c[0]}", OPERATOR, *c[1:], False) for c in OPERATOR_CANNOT]
    + [(f"probe-can-{c[0]}", PROBE, *c[1:], True) for c in PROBE_CAN]
    + [(f"probe-cannot-{c[0]}", PROBE, *c[1:], False) for c in PROBE_CANNOT]
)


@pytest.mark.parametrize(("case", "sa", "verb", "resource", "sub", "where", "allowed"), RBAC,
                         ids=[c[0] for c in RBAC])  # fmt: skip
def test_rbac_is_least_privilege(
    release: SandboxHandle, case: str, sa: str, verb: str, resource: str, sub: str, where: str, allowed: bool
) -> None:
    assert can_i(release, sa, verb, resource, sub, where) is allowed, case


# What declares a foreign gang may be served by an API the sandbox lacks (JobSets, LeaderWorkerSets, PyTorchJobs,
# PodGroups before Kubernetes 1.37), which `kubectl auth can-i` cannot resolve: ask the authorizer directly.
GANG_OWNERS = [
    ("scheduling.k8s.io", "podgroups"),
    ("scheduling.k8s.io", "workloads"),
    ("jobset.x-k8s.io", "jobsets"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("kubeflow.org", "pytorchjobs"),
]
GANG_OWNER_ACCESS = [
    (f"operator-{verb}-{resource}", group, resource, verb, verb in ("get", "list", "watch"))
    for group, resource in GANG_OWNERS
    for verb in ("get", "list", "watch", "update", "delete")
]


def may(sandbox: SandboxHandle, sa: str, verb: str, group: str, resource: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NS}:{sa}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb},
        },
    }  # fmt: skip
    out = sandbox.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return bool(json.loads(out)["status"].get("allowed", False))


@pytest.mark.parametrize(("case", "group", "resource", "verb", "allowed"), GANG_OWNER_ACCESS,
                         ids=[c[0] for c in GANG_OWNER_ACCESS])  # fmt: skip
def test_operator_only_reads_what_declares_a_foreign_gang(
    release: SandboxHandle, case: str, group: str, resource: str, verb: str, allowed: bool
) -> None:
    assert may(release, OPERATOR, verb, group, resource) is allowed, case


# -- tokens and the own-node admission policy ---------------------------------------------------------------------


def client_for(sandbox: SandboxHandle, token: str, tmp: Path) -> kubernetes.client.ApiClient:
    """An API client that authenticates with ``token`` only (no client certificate)."""
    kubeconfig = yaml.safe_load(sandbox.kubeconfig.read_text())
    cluster = kubeconfig["clusters"][0]["cluster"]
    config = kubernetes.client.Configuration()
    config.host = cluster["server"]
    if "certificate-authority-data" in cluster:
        ca = tmp / "ca.crt"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        config.ssl_ca_cert = str(ca)
    elif "certificate-authority" in cluster:
        config.ssl_ca_cert = cluster["certificate-authority"]
    else:
        config.verify_ssl = False
    config.api_key = {"authorization": token}
    config.api_key_prefix = {"authorization": "Bearer"}
    return kubernetes.client.ApiClient(config)


def bound_token(sandbox: SandboxHandle, sa: str, node: str) -> str:
    """A token bound to a pod of ``sa`` on ``node``, as the kubelet gives the probe (it carries the node name)."""
    pod = f"token-{sa}-{node}"[:63].rstrip("-")
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NS},
        "spec": {
            "serviceAccountName": sa, "nodeName": node, "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
        },
    }  # fmt: skip
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    return sandbox.kubectl(
        "create", "token", sa, "-n", NS, "--bound-object-kind", "Pod", "--bound-object-name", pod, "--duration", "1h"
    ).strip()


@pytest.fixture(scope="module")
def nodes(release: SandboxHandle) -> tuple[str, str]:
    assert len(release.nodes) >= 2, "the admission tests need two nodes"
    return release.nodes[0], release.nodes[1]


@pytest.fixture(scope="module")
def probe_on_a(release: SandboxHandle, nodes: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Clients for a probe pod on node A: the CoreV1 and the custom-objects API."""
    client = client_for(release, bound_token(release, PROBE, nodes[0]), tmp_path_factory.mktemp("probe"))
    core = kubernetes.client.CoreV1Api(client)

    # The policy takes effect once the API server's admission informers see it: wait for the first refusal.
    def refused() -> bool:
        try:
            core.patch_node(nodes[1], {"metadata": {"labels": {TEST_LABEL: "other"}}})
        except ApiException as error:
            return error.status == 403 and "own node" in str(error.body)
        release.kubectl("label", "node", nodes[1], f"{TEST_LABEL}-", check=False)
        return False

    release.wait_for("the own-node admission policy to take effect", refused, timeout=30, every=0.5)
    yield core, kubernetes.client.CustomObjectsApi(client)
    for node in nodes:
        release.kubectl("label", "node", node, f"{TEST_LABEL}-", check=False)


def denied(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value
    return str(json.loads(info.value.body)["message"])


def test_probe_may_label_its_own_node(probe_on_a: Any, nodes: tuple[str, str], release: SandboxHandle) -> None:
    core, _ = probe_on_a
    core.patch_node(nodes[0], {"metadata": {"labels": {TEST_LABEL: "own"}}})
    labels = release.get_json("node", nodes[0])["metadata"]["labels"]
    assert labels[TEST_LABEL] == "own"


def test_probe_may_not_label_another_node(probe_on_a: Any, nodes: tuple[str, str], release: SandboxHandle) -> None:
    core, _ = probe_on_a
    message = denied(lambda: core.patch_node(nodes[1], {"metadata": {"labels": {TEST_LABEL: "other"}}}))
    assert POLICY in message
    assert f"this one runs on node {nodes[0]} and may not change nodes {nodes[1]}" in message
    assert TEST_LABEL not in release.get_json("node", nodes[1])["metadata"].get("labels", {})


OWN_NODE_REFUSED = [
    ("foreign-label", {"metadata": {"labels": {"team": "probe-was-here"}}}, "only the gputopo.io/ labels"),
    ("taint", {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}}, "not its spec"),
    ("cordon", {"spec": {"unschedulable": True}}, "not its spec"),
    ("annotation", {"metadata": {"annotations": {"probe": "x"}}}, "annotations"),
]


@pytest.mark.parametrize(("case", "patch", "message"), OWN_NODE_REFUSED, ids=[c[0] for c in OWN_NODE_REFUSED])
def test_probe_may_change_only_gputopo_labels_of_its_node(
    probe_on_a: Any, nodes: tuple[str, str], case: str, patch: dict[str, Any], message: str
) -> None:
    core, _ = probe_on_a
    assert message in denied(lambda: core.patch_node(nodes[0], patch)), case


@pytest.mark.parametrize(("plural", "kind"), [("nodetopologies", "NodeTopology"), ("nodepodgpus", "NodePodGpus")])
def test_probe_may_write_its_own_node_objects_only(
    probe_on_a: Any, nodes: tuple[str, str], plural: str, kind: str
) -> None:
    _, custom = probe_on_a
    args = ("gputopo.io", "v1alpha1", plural)
    # The sandbox's fake probes already published both nodes' objects; a no-op status patch still passes admission.
    custom.patch_cluster_custom_object_status(*args, nodes[0], {"status": {}})
    custom.patch_cluster_custom_object(*args, nodes[0], {"metadata": {"labels": {TEST_LABEL: "own"}}})
    message = denied(lambda: custom.patch_cluster_custom_object_status(*args, nodes[1], {"status": {}}))
    assert f"may not change {plural} {nodes[1]}" in message
    impostor = {"apiVersion": "gputopo.io/v1alpha1", "kind": kind, "metadata": {"name": "not-my-node"}}
    assert f"may not change {plural} not-my-node" in denied(
        lambda: custom.create_cluster_custom_object(*args, impostor)
    )


def test_a_token_not_bound_to_a_pod_is_refused(
    release: SandboxHandle, nodes: tuple[str, str], probe_on_a: Any, tmp_path: Path
) -> None:
    token = release.kubectl("create", "token", PROBE, "-n", NS, "--duration", "1h").strip()
    core = kubernetes.client.CoreV1Api(client_for(release, token, tmp_path))
    assert "not bound to a pod" in denied(
        lambda: core.patch_node(nodes[0], {"metadata": {"labels": {TEST_LABEL: "unbound"}}})
    )


def test_operator_token_cannot_read_secrets(release: SandboxHandle, tmp_path: Path) -> None:
    token = release.kubectl("create", "token", OPERATOR, "-n", NS, "--duration", "1h").strip()
    core = kubernetes.client.CoreV1Api(client_for(release, token, tmp_path))
    core.list_namespaced_config_map(NS)  # what it needs works with the same token
    denied(lambda: core.list_namespaced_secret(NS))
    denied(lambda: core.list_secret_for_all_namespaces())
