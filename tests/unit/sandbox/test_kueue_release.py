"""Kueue's release manifests rendered from a build's kustomize tree: the overlay sets the manager's image and pull
policy and nothing else; a render that does not give the manager that image, or a build without the tree, is a
SandboxError."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.sandbox import SandboxError
from gputopo.sandbox.binaries import KUBE_VERSION, cache_root
from gputopo.sandbox.kueue_install import KueueInstall
from gputopo.sandbox.kueue_release import MANAGER_DEPLOYMENT, RELEASE_IMAGE, kueue_image, overlay, render_release

IMAGE = "gputopo/kueue:v0.17.0"


def _kubectl() -> str | None:
    cached = cache_root() / f"k8s-{KUBE_VERSION}" / "bin" / "kubectl"
    return str(cached) if cached.is_file() else shutil.which("kubectl")


def _tree(root: Path) -> KueueInstall:
    """A kustomize tree shaped like Kueue's: config/default prefixes and namespaces config/components/manager,
    whose kustomization names the manager's image as Kueue's does."""
    default, manager = root / "config" / "default", root / "config" / "components" / "manager"
    default.mkdir(parents=True)
    manager.mkdir(parents=True)
    (default / "kustomization.yaml").write_text(
        yaml.safe_dump({"namespace": "kueue-system", "namePrefix": "kueue-", "resources": ["../components/manager"]})
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "controller-manager", "namespace": "system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "manager", "image": "controller:latest", "imagePullPolicy": "Always", "args": ["-v"]}
                    ]
                }
            }
        },
    }
    (manager / "manager.yaml").write_text(yaml.safe_dump(deployment))
    (manager / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["manager.yaml"],
                "images": [{"name": "controller", "newName": RELEASE_IMAGE, "newTag": "main"}],
            }
        )
    )
    return KueueInstall(root, "v0.17.0")


def test_the_image_is_named_for_the_kueue_version(tmp_path: Path) -> None:
    assert kueue_image(KueueInstall(tmp_path, "v0.17.0")) == IMAGE


def test_the_overlay_sets_the_release_image_and_an_offline_pull_policy() -> None:
    kustomization = overlay("../config/default", "registry.local:5000/gputopo/kueue:v1")
    assert kustomization["resources"] == ["../config/default"]
    assert kustomization["images"] == [{"name": RELEASE_IMAGE, "newName": "registry.local:5000/gputopo/kueue",
                                        "newTag": "v1"}]  # fmt: skip
    (patch,) = kustomization["patches"]
    deployment: dict[str, Any] = yaml.safe_load(patch["patch"])
    assert deployment["metadata"]["name"] == MANAGER_DEPLOYMENT
    assert deployment["spec"]["template"]["spec"]["containers"] == [
        {"name": "manager", "imagePullPolicy": "IfNotPresent"}
    ]


@pytest.mark.parametrize("image", ["gputopo/kueue", "registry.local:5000/kueue"])
def test_an_image_without_a_tag_is_refused(image: str) -> None:
    with pytest.raises(SandboxError, match="has no tag"):
        overlay("../config/default", image)


def test_a_build_without_the_kustomize_tree_says_to_rebuild(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match=r"hack/build-kueue\.sh"):
        render_release(KueueInstall(tmp_path, "v0.17.0"), "kubectl", IMAGE)


def test_kustomize_gives_the_manager_the_image_and_pull_policy_and_keeps_the_rest(tmp_path: Path) -> None:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl (hack/build-k8s.sh builds it)")
    install = _tree(tmp_path)
    (deployment,) = render_release(install, kubectl, IMAGE)
    assert deployment["metadata"] == {"name": MANAGER_DEPLOYMENT, "namespace": "kueue-system"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container == {"name": "manager", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "args": ["-v"]}
    assert [p.name for p in tmp_path.iterdir()] == ["config"], "the overlay was left behind"


def test_a_render_that_misses_the_image_is_an_error(tmp_path: Path) -> None:
    install = _tree(tmp_path)
    fake = tmp_path / "kubectl"
    manifest = {"kind": "Deployment", "metadata": {"name": MANAGER_DEPLOYMENT},
                "spec": {"template": {"spec": {"containers": [{"image": "elsewhere/kueue:main"}]}}}}  # fmt: skip
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{yaml.safe_dump(manifest)}EOF\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match=r"rendered the manager with \['elsewhere/kueue:main'\]"):
        render_release(install, fake, IMAGE)
