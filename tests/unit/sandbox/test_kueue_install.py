"""Kueue's objects for a sandbox, from a build's files: the conversion webhook of the converted CRDs and the webhook
configurations on the loopback webhook Service, with the namespace selectors of Kueue's kustomization; a missing
build is a SandboxError that says how to make it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.sandbox import SandboxError
from gputopo.sandbox.kueue_install import (
    CONVERTED_CRDS,
    KUEUE_NAMESPACE,
    WEBHOOK_SERVICE,
    KueueInstall,
    control_objects,
    crd_documents,
    find_kueue,
    webhook_configurations,
)

PORT = 40443
SELECTOR = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x"]}]}


def _crd(plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
        "spec": {"names": {"plural": plural}, "versions": []},
    }


def _webhook(name: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
    }


def _configurations(*kinds: str) -> str:
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": hooks}
        for kind, name, hooks in (
            (
                "MutatingWebhookConfiguration",
                "mutating-webhook-configuration",
                [_webhook("mpod.kb.io", "/mutate--v1-pod"), _webhook("mjob.kb.io", "/mutate-batch-v1-job")],
            ),
            ("ValidatingWebhookConfiguration", "validating-webhook-configuration", [_webhook("vpod.kb.io", "/v")]),
        )
        if kind in kinds
    ]
    return yaml.safe_dump_all(docs)


KUSTOMIZATION = {
    "resources": ["manifests.yaml"],
    "patches": [
        {
            "patch": yaml.safe_dump(
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "mutating-webhook-configuration"},
                    "webhooks": [{"name": "mpod.kb.io", "namespaceSelector": SELECTOR}],
                }
            )
        }
    ],
}
BOTH = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def build(root: Path, *, kinds: tuple[str, ...] = BOTH, kustomization: bool = True) -> KueueInstall:
    """The files hack/build-kueue.sh leaves: the manager, the CRDs with their stamp and the webhook files."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "kueue").write_text("")
    (root / "crds").mkdir()
    for plural in ("workloads", "topologies"):
        (root / "crds" / f"kueue.x-k8s.io_{plural}.yaml").write_text(yaml.safe_dump(_crd(plural)))
    (root / "crds" / ".version").write_text("v0.17.0")
    (root / "webhook").mkdir()
    (root / "webhook" / "manifests.yaml").write_text(_configurations(*kinds))
    if kustomization:
        (root / "webhook" / "kustomization.yaml").write_text(yaml.safe_dump(KUSTOMIZATION))
    return KueueInstall(root, "v0.17.0")


def test_a_missing_build_says_how_to_make_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTOPO_KUEUE_DIR", str(tmp_path / "none"))
    with pytest.raises(SandboxError, match=r"not built yet .*hack/build-kueue\.sh"):
        find_kueue()


def test_a_build_is_found_where_the_environment_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path / "kueue")
    monkeypatch.setenv("GPUTOPO_KUEUE_DIR", str(tmp_path / "kueue"))
    assert find_kueue().manager == tmp_path / "kueue" / "bin" / "kueue"


@pytest.mark.parametrize(
    ("plural", "converted"),
    [pytest.param("workloads", True, id="workloads-converted"), pytest.param("topologies", False, id="topologies")],
)
def test_only_the_converted_crds_get_the_conversion_webhook(tmp_path: Path, plural: str, converted: bool) -> None:
    assert (plural in CONVERTED_CRDS) == converted
    crds = {c["spec"]["names"]["plural"]: c for c in crd_documents(build(tmp_path), PORT)}
    conversion = crds[plural]["spec"].get("conversion")
    if not converted:
        assert conversion is None
        return
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["service"] == {
        "namespace": KUEUE_NAMESPACE,
        "name": WEBHOOK_SERVICE,
        "path": "/convert",
        "port": PORT,
    }


def test_webhooks_are_renamed_and_call_the_service_at_the_port(tmp_path: Path) -> None:
    mutating, validating = webhook_configurations(build(tmp_path), PORT)
    assert (mutating["metadata"]["name"], validating["metadata"]["name"]) == (
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    )
    services = [w["clientConfig"]["service"] for c in (mutating, validating) for w in c["webhooks"]]
    assert [s["path"] for s in services] == ["/mutate--v1-pod", "/mutate-batch-v1-job", "/v"]
    assert all((s["name"], s["namespace"], s["port"]) == (WEBHOOK_SERVICE, KUEUE_NAMESPACE, PORT) for s in services)


@pytest.mark.parametrize(
    ("kustomization", "selectors"),
    [
        pytest.param(True, {"mpod.kb.io": SELECTOR, "mjob.kb.io": None}, id="patched-pod-webhook"),
        pytest.param(False, {"mpod.kb.io": None, "mjob.kb.io": None}, id="no-kustomization"),
    ],
)
def test_the_kustomization_patches_set_namespace_selectors(
    tmp_path: Path, kustomization: bool, selectors: dict[str, Any]
) -> None:
    mutating, _ = webhook_configurations(build(tmp_path, kustomization=kustomization), PORT)
    assert {w["name"]: w.get("namespaceSelector") for w in mutating["webhooks"]} == selectors


def test_manifests_without_both_configurations_are_an_error(tmp_path: Path) -> None:
    install = build(tmp_path, kinds=("MutatingWebhookConfiguration",))
    with pytest.raises(SandboxError, match="lacks Kueue's webhook configurations"):
        webhook_configurations(install, PORT)


def test_the_webhook_service_points_at_loopback() -> None:
    namespace, secret, service = control_objects()
    assert namespace["metadata"]["name"] == KUEUE_NAMESPACE
    assert "data" not in secret  # the manager's certificate rotator fills it
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    assert service["metadata"] == {"name": WEBHOOK_SERVICE, "namespace": KUEUE_NAMESPACE}
