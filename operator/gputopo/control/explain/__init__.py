"""Why a gang waits and where gangs sit, from the listed cluster: the pure core of ``kubectl gputopo explain``,
``status`` and the live map. Each module one concept; nothing here talks to the API server."""

from gputopo.control.explain.cluster import LiveCluster, LiveObjects, live_cluster
from gputopo.control.explain.explanation import Explanation, explain_gang, explain_job
from gputopo.control.explain.reasons import PendingReason
from gputopo.control.explain.status import ClusterStatus, cluster_status
from gputopo.control.explain.topomap import topology_map

__all__ = [
    "ClusterStatus",
    "Explanation",
    "LiveCluster",
    "LiveObjects",
    "PendingReason",
    "cluster_status",
    "explain_gang",
    "explain_job",
    "live_cluster",
    "topology_map",
]
