"""The Helm chart rendered with helm alone: it lints, its defaults, its settings and RBAC for each GPU
allocation mode, and bad values refused with a clear message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chart_helpers import CHART, NS, OPERATOR, PROBE, RELEASE, SANDBOX_VALUES, find, helm, render

from gputopo.api.group import LABEL_JOB
from gputopo.controller.settings import OperatorSettings
from gputopo.gangs.model import GATE

NAMESPACE_NAME = "kubernetes.io/metadata.name"
GATING_LABEL = "gputopo.io/gating"


def test_chart_lints_strictly() -> None:
    out = helm("lint", str(CHART), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_defaults_follow_the_issue() -> None:
    docs = render()
    deploy = find(docs, "Deployment")
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["replicas"] == 2
    assert pod["metadata"]["annotations"]["checksum/config"]
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert container["resources"]["requests"]

    ds = find(docs, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["sysfs"]["readOnly"] is True
    assert "--sysfs-root=/host/sys" in spec["containers"][0]["args"]

    kinds = {d["kind"] for d in docs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterKopfPeering"} <= kinds
    assert not kinds & {"ServiceMonitor", "Secret"}


def test_fake_mode_drops_the_nvidia_runtime() -> None:
    spec = find(render(*SANDBOX_VALUES), "DaemonSet")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec
    assert "--fake=hgx-h100" in spec["containers"][0]["args"]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in spec["containers"][0]["env"]}


def test_nic_roles_and_the_host_route_table() -> None:
    spec = find(render(), "DaemonSet")["spec"]["template"]["spec"]
    assert "--proc-root=/host/proc" in spec["containers"][0]["args"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["host-net"] == {"name": "host-net", "mountPath": "/host/proc/1/net", "readOnly": True}
    assert {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}["host-net"] == "/proc/1/net"
    assert not any(a.startswith("--compute-nics") for a in spec["containers"][0]["args"])

    named = render("--set", "probe.nicRoles.compute=mlx5_[0-3]", "--set", "probe.hostNetPath=")
    spec = find(named, "DaemonSet")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert "--compute-nics=mlx5_[0-3]" in args and "--proc-root=" in args
    assert "host-net" not in {v["name"] for v in spec["volumes"]}


def test_every_operator_setting_the_chart_writes_is_one_the_operator_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt key would be ignored by the operator (its settings ignore unknown variables), silently."""
    values = (
        *("--set", "operator.config.placementsPerPass=16", "--set", "gangs.recordRetentionSeconds=45"),
        *("--set", "operator.config.readinessFailedPasses=5", "--set", "gangs.planningSeconds=2"),
        *("--set", "gangs.phantomHeadroomRanks=3"),
    )
    data = find(render(*values), "ConfigMap", OPERATOR)["data"]
    known = {f"GPUTOPO_{name.upper()}" for name in OperatorSettings.model_fields}
    assert set(data) <= known, set(data) - known
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    settings = OperatorSettings()
    assert settings.placements_per_pass == 16 and settings.api_concurrency == 64
    assert settings.gang_record_retention_seconds == 45
    assert settings.readiness_failed_passes == 5 and settings.gang_planning_seconds == 2
    assert settings.gang_phantom_headroom_ranks == 3


def _operator_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in find(docs, "ClusterRole", OPERATOR)["rules"] if "resource.k8s.io" in r["apiGroups"]]


def test_gpu_allocation_defaults_to_the_device_plugin_and_asks_for_no_dra_rights() -> None:
    docs = render()
    assert find(docs, "ConfigMap", OPERATOR)["data"]["GPUTOPO_GPU_ALLOCATION"] == "devicePlugin"
    assert _operator_rules(docs) == []


def test_dra_allocation_grants_claims_slices_templates_and_a_foreign_claims_allocation() -> None:
    docs = render("--set", "operator.config.gpuAllocation=dra")
    assert find(docs, "ConfigMap", OPERATOR)["data"]["GPUTOPO_GPU_ALLOCATION"] == "dra"
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in _operator_rules(docs)}
    assert rules == {
        ("resourceclaims",): {"get", "list", "watch", "create", "delete", "patch"},
        ("resourceclaims/status", "resourceclaims/binding"): {"patch"},
        ("resourceslices", "resourceclaimtemplates"): {"get", "list", "watch"},
    }


@pytest.mark.parametrize("allocation", ["plan", "device-plugin", "kubelet"])
def test_only_the_fake_dra_driver_gets_slice_and_claim_rights_and_a_device_class(allocation: str) -> None:
    docs = render(*SANDBOX_VALUES, "--set", f"probe.fakeAllocation={allocation}")
    assert not [r for r in find(docs, "ClusterRole", PROBE)["rules"] if "resource.k8s.io" in r["apiGroups"]]
    assert not [d for d in docs if d["kind"] == "DeviceClass"]


def test_the_fake_dra_driver_mounts_the_kubelet_plugin_dirs_and_cdi_and_installs_nvidias_device_class() -> None:
    docs = render(*SANDBOX_VALUES, "--set", "probe.fakeAllocation=dra")
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in find(docs, "ClusterRole", PROBE)["rules"]
             if "resource.k8s.io" in r["apiGroups"]}  # fmt: skip
    assert rules == {("resourceslices",): {"get", "create", "patch"}, ("resourceclaims",): {"get"}}
    spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    hosts = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    for name, path in (("kubelet-plugins", "/var/lib/kubelet/plugins"),
                       ("kubelet-registry", "/var/lib/kubelet/plugins_registry"), ("cdi", "/var/run/cdi")):  # fmt: skip
        assert mounts[name] == hosts[name] == path, "the kubelet dials the plugin at the path it registers"
    assert "--fake-allocation=dra" in spec["containers"][0]["args"]
    assert "device-plugins" not in mounts
    expression = find(docs, "DeviceClass", "gpu.nvidia.com")["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def test_a_settings_change_rolls_the_operator() -> None:
    def checksum(*args: str) -> str:
        deploy = find(render(*args), "Deployment")
        return str(deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() == checksum()
    assert checksum() != checksum("--set", "operator.config.quarantineSeconds=90")


def test_optional_monitoring_renders_when_asked() -> None:
    docs = render(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true",
        "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
    )  # fmt: skip
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {OPERATOR, PROBE}
    dashboard = find(docs, "ConfigMap", f"{RELEASE}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    panels = json.loads(dashboard["data"]["gputopo.json"])["panels"]
    assert panels


REFUSED = [
    ("unknown-key", ["--set", "operator.replica=3"], "additional properties 'replica' not allowed"),
    ("negative-replicas", ["--set", "operator.replicas=-1"], "/operator/replicas"),
    ("interval-not-a-number", ["--set", "probe.intervalSeconds=fast"], "/probe/intervalSeconds"),
    ("bad-digest", ["--set", "operator.image.digest=latest"], "/operator/image/digest"),
    ("log-format", ["--set", "operator.config.logFormat=xml"], "/operator/config/logFormat"),
    ("gpu-allocation", ["--set", "operator.config.gpuAllocation=mig"], "/operator/config/gpuAllocation"),
    ("bad-update-strategy", ["--set", "probe.updateStrategy.type=Recreate"], "/probe/updateStrategy/type"),
    ("unknown-nic-role", ["--set", "probe.nicRoles.management=eth0"], "additional properties 'management' not allowed"),
    ("replicas-without-leader-election", ["--set", "operator.leaderElection.enabled=false"],
     "operator.replicas is 2 but operator.leaderElection.enabled is false"),
    ("probe-on-every-node", ["--set", "probe.nodeSelector=null"], "the probe would run on every node"),
    ("tier-oversubscription-mismatch", ["--set", "operator.config.tierLabels={a,b}",
                                        "--set-json", "operator.config.tierOversubscription=[2]"],
     "tierOversubscription has 1 values but operator.config.tierLabels has 2"),
    ("pdb-blocks-drains", ["--set", "operator.podDisruptionBudget.minAvailable=2"],
     "must be less than operator.replicas"),
    ("service-monitor-without-prometheus-operator", ["--set", "metrics.serviceMonitor.enabled=true"],
     "install the Prometheus Operator first"),
    ("gang-gate-before-kubernetes-1-36", ["--kube-version", "1.35.2"],
     "gangs.enabled is true but the cluster runs Kubernetes v1.35.2"),
    ("unknown-gang-selector-key", ["--set", "gangs.namespaceSelector.matchLabel.team=ml"],
     "additional properties 'matchLabel' not allowed"),
    ("fake-mode-outside-a-test-cluster", ["--set", "probe.fake=hgx-h100"],
     "probe.fake is \"hgx-h100\" but probe.testCluster is false"),
    ("fake-kubelet-mode-outside-a-test-cluster",
     ["--set", "probe.fake=hgx-h100", "--set", "probe.fakeAllocation=kubelet", "--set", "probe.testCluster=false"],
     "it is for test clusters (kind, kwok) only"),
    ("prometheus-rule-without-prometheus-operator", ["--set", "metrics.prometheusRule.enabled=true"],
     "install the Prometheus Operator first"),
    ("bad-gang-selector-operator",
     ["--set-json", 'gangs.objectSelector.matchExpressions=[{"key":"a","operator":"Is"}]'],
     "/gangs/objectSelector/matchExpressions/0/operator"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_bad_values_are_refused_with_a_clear_message(case: str, args: list[str], message: str) -> None:
    out = helm("template", RELEASE, str(CHART), *args)
    assert out.returncode != 0, f"{case}: helm accepted the values"
    assert message in out.stderr, out.stderr


# -- the placement gate for gangs gputopo does not own ----------------------------------------------------------

GATE_POLICY = f"{RELEASE}-placement-gate"
GANG_LABELS = {
    "gputopo.io/gang",
    "kueue.x-k8s.io/pod-group-name",
    "jobset.sigs.k8s.io/jobset-name",
    "leaderworkerset.sigs.k8s.io/name",
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-completion-index",
}


def _gate(*args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = render(*args)
    return find(docs, "MutatingAdmissionPolicy", GATE_POLICY), find(docs, "MutatingAdmissionPolicyBinding", GATE_POLICY)


def test_gate_policy_gates_gpu_pods_of_gangs_on_create_and_never_blocks_a_pod() -> None:
    policy, binding = _gate()
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore"
    assert spec["reinvocationPolicy"] == "IfNeeded"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
    ]
    conditions = {c["name"]: " ".join(c["expression"].split()) for c in spec["matchConditions"]}
    assert list(conditions) == ["requests-gpus", "in-a-gang", "not-gated-yet", "not-a-trainingjob-pod"]
    assert "'nvidia.com/gpu' in c.resources.limits" in conditions["requests-gpus"]
    assert "object.spec.initContainers" in conditions["requests-gpus"]
    assert "object.spec.resourceClaims" in conditions["requests-gpus"]
    assert "object.spec.schedulingGroup.podGroupName" in conditions["in-a-gang"]
    assert all(f"'{label}'" in conditions["in-a-gang"] for label in GANG_LABELS)
    assert f"g.name == '{GATE}'" in conditions["not-gated-yet"]
    assert f"'{LABEL_JOB}' in object.metadata.labels" in conditions["not-a-trainingjob-pod"]
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "JSONPatch"
    patch = " ".join(mutation["jsonPatch"]["expression"].split())
    assert '"/spec/schedulingGates/-"' in patch and f'{{"name": "{GATE}"}}' in patch
    assert "Object.spec" not in patch, "kube-apiserver 1.36 panics on a list of typed objects in a JSONPatch value"
    assert binding["spec"]["policyName"] == GATE_POLICY


OPTED_IN = {"key": GATING_LABEL, "operator": "In", "values": ["enabled"]}
NOT_OPTED_OUT = {"key": GATING_LABEL, "operator": "NotIn", "values": ["disabled"]}


def test_gate_binding_gates_only_namespaces_that_opt_in_by_default() -> None:
    _, binding = _gate()
    match = binding["spec"]["matchResources"]
    assert match["namespaceSelector"] == {
        "matchExpressions": [{"key": NAMESPACE_NAME, "operator": "NotIn", "values": ["kube-system", NS]}, OPTED_IN]
    }
    assert match["objectSelector"] == {}


def test_gate_binding_without_opt_in_gates_every_namespace_but_those_opted_out() -> None:
    _, binding = _gate("--set", "gangs.optIn=false")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": NAMESPACE_NAME, "operator": "NotIn", "values": ["kube-system", NS]}, NOT_OPTED_OUT]
    }


def test_gate_binding_follows_the_selectors_and_the_operators_namespaces() -> None:
    _, binding = _gate(
        "--set", "gangs.namespaceSelector.matchLabels.team=ml", "--set", "gangs.objectSelector.matchLabels.gpu=yes",
        "--set", "operator.config.namespaces={ml-a,ml-b}",
    )  # fmt: skip
    match = binding["spec"]["matchResources"]
    assert match["namespaceSelector"] == {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [
            {"key": NAMESPACE_NAME, "operator": "NotIn", "values": ["kube-system", NS]},
            OPTED_IN,
            {"key": NAMESPACE_NAME, "operator": "In", "values": ["ml-a", "ml-b"]},
        ],
    }
    assert match["objectSelector"] == {"matchLabels": {"gpu": "yes"}}


def test_gate_policy_can_be_turned_off() -> None:
    docs = render("--set", "gangs.enabled=false")
    assert not {d["kind"] for d in docs} & {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    assert not [d for d in docs if d["kind"] == "Job"], "no gates set, none to lift on uninstall"
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert "gangplacements.gputopo.io" in crds, "GangPlacements stay: gangs gated by hand are still placed"


def test_operator_may_place_gangs_it_does_not_own() -> None:
    rules = find(render(), "ClusterRole", OPERATOR)["rules"]
    granted = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    read = {"get", "list", "watch"}
    assert {"patch"} <= granted[("", "pods")] and granted[("", "pods/eviction")] == {"create"}
    assert granted[("gputopo.io", "gangplacements")] >= read | {"create", "update", "patch", "delete"}
    assert granted[("gputopo.io", "gangplacements/status")] == {"get", "update", "patch"}
    for owner in (("scheduling.k8s.io", "podgroups"), ("scheduling.k8s.io", "workloads"), ("batch", "jobs"),
                  ("jobset.x-k8s.io", "jobsets"), ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                  ("kubeflow.org", "pytorchjobs")):  # fmt: skip
        assert granted[owner] == read, owner


def test_operator_may_make_and_release_the_kueue_workloads_of_its_trainingjobs() -> None:
    rules = find(render(), "ClusterRole", OPERATOR)["rules"]
    granted = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch", "create", "delete"}
    assert granted[("kueue.x-k8s.io", "workloads/status")] == {"get", "patch", "update"}


# -- the way out of gating, and the probe's least privilege ----------------------------------------------------

UNGATE = f"{RELEASE}-ungate"
HOOK = {"helm.sh/hook": "post-delete", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}


def test_uninstall_lifts_the_gates_with_a_hook_job_of_its_own_minimal_rights() -> None:
    docs = render()
    hooks = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "post-delete"]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in hooks) == [
        ("ClusterRole", UNGATE), ("ClusterRoleBinding", UNGATE), ("Job", UNGATE), ("ServiceAccount", UNGATE)
    ]  # fmt: skip
    for hook in hooks:
        assert HOOK.items() <= hook["metadata"]["annotations"].items(), hook["kind"]
    job = find(docs, "Job", UNGATE)
    weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    assert weights["Job"] > max(w for k, w in weights.items() if k != "Job"), "its rights exist before it runs"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "gputopo.cli.ungate", "--all"]
    assert container["image"] == find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pod["serviceAccountName"] == UNGATE and pod["securityContext"]["runAsNonRoot"] is True
    assert find(docs, "ClusterRole", UNGATE)["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]}
    ]
    binding = find(docs, "ClusterRoleBinding", UNGATE)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": UNGATE, "namespace": NS}]
    assert not [d for d in render("--set", "gangs.ungateOnUninstall=false") if d["kind"] == "Job"]


def test_the_example_alerts_watch_the_oldest_gated_pod_and_the_operators_absence() -> None:
    docs = render(
        "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.gatedPodAgeSeconds=600",
        "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
    )  # fmt: skip
    (group,) = find(docs, "PrometheusRule")["spec"]["groups"]
    rules = {r["alert"]: r for r in group["rules"]}
    assert rules["GputopoGatedPodStranded"]["expr"] == (
        f'max(gputopo_oldest_gated_pod_age_seconds{{namespace="{NS}"}}) > 600'
    )
    assert f'service="{OPERATOR}-metrics"' in rules["GputopoOperatorDown"]["expr"]
    assert all("gputopo ungate" in r["annotations"]["description"] for r in rules.values())
    assert not [d for d in render() if d["kind"] == "PrometheusRule"]


PROBE_POD_READS = [
    ("real-gpus", [], False),
    ("fake-plan", [*SANDBOX_VALUES, "--set", "probe.fakeAllocation=plan"], True),
    ("fake-device-plugin", [*SANDBOX_VALUES, "--set", "probe.fakeAllocation=device-plugin"], True),
    ("fake-kubelet", [*SANDBOX_VALUES, "--set", "probe.fakeAllocation=kubelet"], False),
    ("fake-dra", [*SANDBOX_VALUES, "--set", "probe.fakeAllocation=dra"], False),
]


@pytest.mark.parametrize(("case", "args", "lists"), PROBE_POD_READS, ids=[c[0] for c in PROBE_POD_READS])
def test_the_probe_lists_pods_only_in_the_fake_modes_that_read_them(case: str, args: list[str], lists: bool) -> None:
    rules = find(render(*args), "ClusterRole", PROBE)["rules"]
    assert any("pods" in r["resources"] and "" in r["apiGroups"] for r in rules) is lists, case


def test_fake_mode_tells_the_probe_it_runs_on_a_declared_test_cluster() -> None:
    env = find(render(*SANDBOX_VALUES), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GPUTOPO_PROBE_TEST_CLUSTER", "value": "true"} in env
    real = find(render(), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "GPUTOPO_PROBE_TEST_CLUSTER" not in {e["name"] for e in real}


def test_the_probes_own_node_policy_covers_its_resourceslices() -> None:
    policy = find(render(), "ValidatingAdmissionPolicy", f"{PROBE}-own-node")["spec"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])) for r in policy["matchConstraints"]["resourceRules"]}
    assert (("resource.k8s.io",), ("resourceslices",)) in rules
    checks = " ".join(" ".join(v["expression"].split()) for v in policy["validations"])
    assert "variables.sliceNode == variables.nodeName" in checks
    assert "oldObject.spec.nodeName == variables.nodeName" in checks, "an update may not take another node's slice"


DIGEST = "sha256:" + "ab" * 32


def test_images_are_pinned_by_digest_when_given() -> None:
    docs = render("--set", f"operator.image.digest={DIGEST}", "--set", f"probe.image.digest={DIGEST}")
    images = [
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
        find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"],
        find(docs, "Job", UNGATE)["spec"]["template"]["spec"]["containers"][0]["image"],
    ]
    assert images == [
        f"ghcr.io/gputopo/gputopo-operator@{DIGEST}",
        f"ghcr.io/gputopo/gputopo-probe@{DIGEST}",
        f"ghcr.io/gputopo/gputopo-operator@{DIGEST}",
    ]
