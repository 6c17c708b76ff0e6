"""The NodePodGpus resource: one per GPU node, written by the node probe, read by the operator.

Which GPUs the kubelet gave each pod on the node (the probe reads the kubelet's PodResources API), and when
the probe last said so. It is apart from the node's NodeTopology for the reason the kubelet's heartbeat is a
Lease apart from its Node: it changes with every pod that starts or ends and with every heartbeat, and each
write of an object costs the API server, etcd and every watcher in proportion to the whole object. This one is
a few hundred bytes; the NodeTopology of an 8-GPU node is some 8 kB, and is now written only when the
hardware or its health changes.
"""

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from gputopo.api.base import NodeObject, StatusModel

__all__ = ["NodePodGpus", "NodePodGpusStatus", "PodGpus"]


class PodGpus(StatusModel):
    """Which GPUs the kubelet's device manager gave a pod (from the PodResources API)."""

    namespace: str
    name: str
    gpus: list[int] = Field(default_factory=list)


class NodePodGpusStatus(StatusModel):
    observed_at: datetime | None = Field(
        default=None, description="When the probe last published (it republishes unchanged pods as a heartbeat)."
    )
    pods: list[PodGpus] = Field(default_factory=list)


class NodePodGpus(NodeObject):
    kind: ClassVar[str] = "NodePodGpus"
    plural: ClassVar[str] = "nodepodgpus"
    status: NodePodGpusStatus = Field(default_factory=NodePodGpusStatus)
