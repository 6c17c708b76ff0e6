"""Simulated GPU nodes: kwok Node objects whose capacity carries ``nvidia.com/gpu``."""

from __future__ import annotations

from typing import Any

from gputopo.api.group import GPU_RESOURCE
from gputopo.sandbox.profiles import TIER0_LABEL, TIER1_LABEL, NodePlan

__all__ = ["KWOK_ANNOTATION", "node_manifest"]

# kwokctl's kwok-controller manages (heartbeats, runs pods of) nodes carrying this annotation.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def node_manifest(plan: NodePlan, gpu_count: int, gpu_model: str) -> dict[str, Any]:
    capacity = {
        "cpu": "128",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "10Ti",
        GPU_RESOURCE: str(gpu_count),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": plan.name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": plan.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "node.kubernetes.io/instance-type": plan.node_type,
                "nvidia.com/gpu.present": "true",
                TIER0_LABEL: plan.leaf,
                TIER1_LABEL: plan.spine,
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "phase": "Running",
        },
    }
