"""What Kueue writes on the pods of a workload it admitted, and whether it places them itself (TAS).

Checked against sigs.k8s.io/kueue v0.17.0:

- On admission Kueue writes the Workload's name into each pod set's template (``kueue.x-k8s.io/workload``,
  ``pkg/controller/jobframework/reconciler.go`` ``getPodSetsInfoFromStatus``, while its TopologyAwareScheduling
  feature is on, as it is by default) and the label ``kueue.x-k8s.io/podset``; plain pods get both when their
  ``kueue.x-k8s.io/admission`` gate is removed (``pkg/controller/jobs/pod/pod_controller.go`` ``prepare``).
- A pod set admitted on a flavor with a topology (Topology-Aware Scheduling) also gets the scheduling gate
  ``kueue.x-k8s.io/topology`` (``pkg/podset/podset.go`` ``FromAssignment``), and, when it asked for no topology,
  the annotation ``kueue.x-k8s.io/podset-unconstrained-topology``. Kueue's ungater later removes that gate and
  pins the pod by node selector (``pkg/controller/tas/topology_ungater.go``).
- Kueue itself calls a pod TAS when it carries ``podset-required-topology``, ``podset-preferred-topology``,
  ``podset-slice-required-topology`` or ``podset-unconstrained-topology`` (``pkg/util/tas/tas.go`` ``IsTAS``).
- A plain pod carries the topology gate from creation, TAS or not, until it is admitted: ``prepare`` removes it
  together with the admission gate when the flavor has no topology. So the topology gate says TAS only once the
  admission gate is gone.

So a pod is Kueue's to place when the admission gate is gone and either the topology gate is still there, or
the pod is of an admitted workload and has one of ``IsTAS``'s annotations. A pod with those annotations and no
Workload of Kueue's is not under Kueue: gputopo places it, reading them as its own needs.

Pure: a pod's body in, a fact out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gputopo.gangs.annotations import KUEUE_PREFERRED_TOPOLOGY, KUEUE_REQUIRED_TOPOLOGY
from gputopo.gangs.claims import annotations_of, gates_of, labels_of

__all__ = [
    "ADMISSION_GATE",
    "PODSET_LABEL",
    "TAS_ANNOTATIONS",
    "TOPOLOGY_GATE",
    "UNCONSTRAINED_TOPOLOGY",
    "WORKLOAD_ANNOTATION",
    "kueue_workload",
    "placed_by_kueue",
]

ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE: Final = "kueue.x-k8s.io/topology"
WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
UNCONSTRAINED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
# Kueue's pkg/util/tas/tas.go IsTAS: any of these makes a pod of an admitted workload a TAS pod.
TAS_ANNOTATIONS: Final = (
    KUEUE_REQUIRED_TOPOLOGY,
    KUEUE_PREFERRED_TOPOLOGY,
    "kueue.x-k8s.io/podset-slice-required-topology",
    UNCONSTRAINED_TOPOLOGY,
)


def kueue_workload(pod: Mapping[str, Any]) -> str | None:
    """The name of the Kueue Workload whose admission let the pod run ("" when Kueue marked the pod admitted but
    wrote no name); None when the pod is of no workload Kueue admitted."""
    name = annotations_of(pod).get(WORKLOAD_ANNOTATION)
    if name is not None:
        return name
    return "" if PODSET_LABEL in labels_of(pod) else None


def placed_by_kueue(pod: Mapping[str, Any]) -> bool:
    """Whether Kueue's Topology-Aware Scheduling places the pod (see the module's docstring): then gputopo plans
    nothing for it and only lifts its own gate."""
    gates = gates_of(pod)
    if ADMISSION_GATE in gates:
        return False  # not admitted yet: its flavor is not chosen
    if TOPOLOGY_GATE in gates:
        return True
    annotations = annotations_of(pod)
    return kueue_workload(pod) is not None and any(a in annotations for a in TAS_ANNOTATIONS)
