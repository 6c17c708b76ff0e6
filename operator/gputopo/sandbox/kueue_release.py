"""Kueue as its release installs it on a cluster of real kubelets (the kind end-to-end test), with the manager's
image built here.

Kueue's release manifests (``manifests.yaml`` of a GitHub release) are ``kustomize build config/default`` of the
module after ``kustomize edit set image controller=<release image>`` (Kueue's ``make artifacts``). The pinned
build keeps the module's ``config/`` tree (``hack/build-kueue.sh``); this renders the same ``config/default``
with ``kubectl kustomize`` (kustomize is built into kubectl) through an overlay that does what the release
does to it and one thing a cluster without a registry needs:

- ``images``: the manager's image is ``gputopo/kueue:<version>`` (``hack/build-images.sh``), as the release sets
  its registry's image;
- ``imagePullPolicy: IfNotPresent`` on the manager (Kueue's ``Always`` would pull an image that ``kind load``
  put on the nodes, from a registry that is not there).

Everything else is Kueue's: its CRDs with their conversion webhook, the manager's Deployment, ServiceAccount and
RBAC, its Configuration (leader election, every integration), the webhook Service and configurations with
Kueue's internal certificate management (the manager fills the empty Secret ``kueue-webhook-server-cert`` and
injects its CA), the metrics Service and the visibility API server with its APIServices.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.kueue_install import KUEUE_NAMESPACE, KueueInstall, load_documents

__all__ = [
    "IMAGE_REPOSITORY",
    "MANAGER_DEPLOYMENT",
    "RELEASE_IMAGE",
    "kueue_image",
    "overlay",
    "render_release",
]

IMAGE_REPOSITORY = "gputopo/kueue"
# The image name config/components/manager gives the manager (its kustomization's `images`), which the release
# replaces with its own registry's image.
RELEASE_IMAGE = "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue"
MANAGER_DEPLOYMENT = "kueue-controller-manager"
_MANAGER = "manager"  # the Deployment's container


def kueue_image(install: KueueInstall) -> str:
    """The image ``hack/build-images.sh`` builds of this Kueue version."""
    return f"{IMAGE_REPOSITORY}:{install.version}"


def overlay(default_dir: str, image: str) -> dict[str, Any]:
    """The kustomization over Kueue's ``config/default`` (``default_dir``, relative to the overlay) that sets the
    manager's ``image`` (``name:tag``) and pulls it only if the node lacks it."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        raise SandboxError(f"image {image!r} has no tag")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": MANAGER_DEPLOYMENT, "namespace": KUEUE_NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{"name": _MANAGER, "imagePullPolicy": "IfNotPresent"}]}}},
    }
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [default_dir],
        "images": [{"name": RELEASE_IMAGE, "newName": name, "newTag": tag}],
        "patches": [{"patch": yaml.safe_dump(deployment, sort_keys=False)}],
    }


def render_release(install: KueueInstall, kubectl: str | Path, image: str) -> list[dict[str, Any]]:
    """Kueue's release manifests for ``image``, rendered by ``kubectl kustomize`` from the build's ``config/``."""
    default = install.config_dir / "default"
    if not (default / "kustomization.yaml").is_file():
        raise SandboxError(f"no Kueue kustomize tree at {install.config_dir}; rebuild with hack/build-kueue.sh")
    # kustomize takes a base only by a relative path, so the overlay lives beside config/ for the render.
    with tempfile.TemporaryDirectory(prefix=".overlay-", dir=install.root) as tmp:
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(overlay("../config/default", image)))
        proc = subprocess.run([str(kubectl), "kustomize", tmp], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SandboxError(f"kubectl kustomize of {default} failed: {proc.stderr.strip()}")
    docs = load_documents(proc.stdout)
    managers = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == MANAGER_DEPLOYMENT]
    images = [c["image"] for d in managers for c in d["spec"]["template"]["spec"]["containers"]]
    if images != [image]:
        raise SandboxError(f"Kueue's release rendered the manager with {images}, not {image}")
    return docs
