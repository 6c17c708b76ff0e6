"""Where the pinned Kueue build is (``hack/build-kueue.sh``), and the objects its manager needs in a cluster.

The build keeps Kueue's release files beside the manager: its CRDs and its webhook configurations
(``config/components/webhook``) as the module ships them. What Kueue's own kustomization does to them is done here:
the ``kueue-`` name prefix, the ``kueue-system`` namespace, the conversion webhook of the five CRDs that have one,
and the namespace selectors of its pod, Deployment and StatefulSet webhooks. The webhook Service is an
ExternalName service for 127.0.0.1, so the API server calls the manager on loopback at the webhook port while
checking its certificate against the Service's DNS name, the name Kueue's own certificates carry.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gputopo.sandbox.binaries import cache_root
from gputopo.sandbox.errors import SandboxError

__all__ = [
    "CONVERTED_CRDS",
    "KUEUE_NAMESPACE",
    "KUEUE_VERSION",
    "WEBHOOK_SECRET",
    "WEBHOOK_SERVICE",
    "KueueInstall",
    "control_objects",
    "crd_documents",
    "find_kueue",
    "load_documents",
    "webhook_configurations",
]

KUEUE_VERSION = os.environ.get("KUEUE_VERSION", "v0.17.0")
KUEUE_NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
# The CRDs whose versions Kueue's webhook converts (config/components/crd/kustomization.yaml), which are also the
# ones its certificate rotator injects the CA into.
CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class KueueInstall:
    """The build of one Kueue version: the manager, its CRDs and its webhook configurations."""

    root: Path
    version: str

    @property
    def manager(self) -> Path:
        return self.root / "bin" / "kueue"

    @property
    def crd_dir(self) -> Path:
        return self.root / "crds"

    @property
    def webhook_dir(self) -> Path:
        return self.root / "webhook"

    @property
    def config_dir(self) -> Path:
        """The module's kustomize tree (``config/``), whose ``default`` is Kueue's release."""
        return self.root / "config"


def _hack_script() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "hack" / "build-kueue.sh"
        if candidate.is_file():
            return candidate
    return None


def find_kueue() -> KueueInstall:
    """The cached Kueue build, or a SandboxError that says how to make it."""
    root = Path(os.environ.get("GPUTOPO_KUEUE_DIR", str(cache_root() / f"kueue-{KUEUE_VERSION}")))
    install = KueueInstall(root, KUEUE_VERSION)
    missing = [
        str(path)
        for path in (install.manager, install.crd_dir / ".version", install.webhook_dir / "manifests.yaml")
        if not path.is_file()
    ]
    if missing:
        script = _hack_script()
        how = f"bash {script}" if script else "hack/build-kueue.sh from a gputopo source checkout"
        raise SandboxError(
            f"Kueue {KUEUE_VERSION} is not built yet (missing: {', '.join(missing)}). "
            f"Build it once with `{how}` (a few minutes cold; it needs the Go toolchain)."
        )
    return install


# Kueue's CRDs run to over 20,000 lines: libyaml reads them ten times faster than the pure-Python loader.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_documents(text: str) -> list[dict[str, Any]]:
    """The mappings of a YAML stream (Kueue's CRDs among them), read with libyaml where it is there."""
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if isinstance(doc, dict)]


def _load_all(path: Path) -> list[dict[str, Any]]:
    return load_documents(path.read_text())


def crd_documents(install: KueueInstall, webhook_port: int) -> list[dict[str, Any]]:
    """Kueue's CRDs, the converted ones with their conversion webhook on the webhook Service."""
    docs = []
    for path in sorted(install.crd_dir.glob("*.yaml")):
        for crd in _load_all(path):
            plural = crd["spec"]["names"]["plural"]
            if plural in CONVERTED_CRDS:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"service": _service_ref("/convert", webhook_port)},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            docs.append(crd)
    if not docs:
        raise SandboxError(f"no CRDs in {install.crd_dir}; rebuild with hack/build-kueue.sh")
    return docs


def _service_ref(path: str, port: int) -> dict[str, Any]:
    return {"namespace": KUEUE_NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": port}


def _selector_patches(install: KueueInstall) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, webhook name) -> the fields the webhook kustomization's patches set on that webhook."""
    path = install.webhook_dir / "kustomization.yaml"
    if not path.is_file():
        return {}
    kustomization = yaml.safe_load(path.read_text()) or {}
    patches: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in kustomization.get("patches") or []:
        text = entry.get("patch") if isinstance(entry, Mapping) else None
        for doc in yaml.safe_load_all(text or ""):
            if not isinstance(doc, dict) or doc.get("kind") not in _WEBHOOK_KINDS:
                continue
            for webhook in doc.get("webhooks") or []:
                fields = {k: v for k, v in webhook.items() if k != "name"}
                patches.setdefault((doc["kind"], webhook["name"]), {}).update(fields)
    return patches


def webhook_configurations(install: KueueInstall, webhook_port: int) -> list[dict[str, Any]]:
    """Kueue's Mutating and ValidatingWebhookConfiguration as its release installs them, on the webhook Service
    at ``webhook_port``; the manager's certificate rotator fills in their CA bundle."""
    patches = _selector_patches(install)
    configurations = []
    for doc in _load_all(install.webhook_dir / "manifests.yaml"):
        if doc.get("kind") not in _WEBHOOK_KINDS:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        for webhook in doc.get("webhooks") or []:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"service": _service_ref(path, webhook_port)}
            webhook.update(copy.deepcopy(patches.get((doc["kind"], webhook["name"]), {})))
        configurations.append(doc)
    if len(configurations) != len(_WEBHOOK_KINDS):
        raise SandboxError(f"{install.webhook_dir / 'manifests.yaml'} lacks Kueue's webhook configurations")
    return configurations


def control_objects() -> list[dict[str, Any]]:
    """Kueue's namespace, the Secret its certificate rotator fills, and the webhook Service on loopback."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": WEBHOOK_SERVICE, "namespace": KUEUE_NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        },
    ]
