"""Stand-ins for the CRDs of controllers the module proxy does not carry (JobSet, LeaderWorkerSet, PyTorchJob):
the same group, version and kind, keeping whatever spec and status they are given."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


@contextmanager
def installed(kubectl: Callable[..., Any], crds: Sequence[dict[str, Any]]) -> Iterator[None]:
    """The CRDs applied and Established for the block, then deleted (without waiting: the next module waits)."""
    for c in crds:  # one another module deleted may still be going
        kubectl("wait", "--for=delete", f"crd/{c['metadata']['name']}", "--timeout=60s", check=False)
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(crds)}))
    kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s", *[f"crd/{c['metadata']['name']}" for c in crds]
    )
    try:
        yield
    finally:
        for c in crds:
            kubectl("delete", "crd", c["metadata"]["name"], "--wait=false", check=False)
