"""Stand-ins for the CRDs of controllers the module proxy does not carry (JobSet, LeaderWorkerSet, PyTorchJob):
the same group, version and kind, keeping whatever spec and status they are given."""

from __future__ import annotations

from typing import Any


def crd(group: str, version: str, plural: str, kind: str) -> dict[str, Any]:
    """A minimal namespaced CRD that keeps whatever spec and status it is given, with a status subresource."""
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": loose, "status": loose}}},
                }
            ],
        },
    }
