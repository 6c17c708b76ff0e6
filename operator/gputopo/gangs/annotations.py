"""A foreign gang's topology needs, read from annotations on its pods (set on the pod template by the user).

gputopo's own names (``gputopo.io/intra-node``, ...) say what a TrainingJob's ``spec.topology`` says; Kueue TAS's
``podset-required-topology``/``podset-preferred-topology`` name a node label whose domain the gang must (or
should) stay in. A value that cannot be read is a problem naming the annotation and the value, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gputopo.api import group
from gputopo.api.fields import shown, whole_number
from gputopo.api.gangplacement import MAX_GANG_SIZE
from gputopo.api.trainingjob import MAX_TIER, IntraNode
from gputopo.gangs.model import Needs

__all__ = [
    "ANNOTATION_EVICT_BARE_PODS",
    "ANNOTATION_GANG",
    "ANNOTATION_GPUS_PER_RANK",
    "ANNOTATION_INTRA_NODE",
    "ANNOTATION_MIN_BUS_BANDWIDTH",
    "ANNOTATION_PREFERRED_TIER",
    "ANNOTATION_REQUIRED_TIER",
    "ANNOTATION_SLICE_SIZE",
    "KUEUE_PREFERRED_TOPOLOGY",
    "KUEUE_REQUIRED_TOPOLOGY",
    "PodNeeds",
    "read_needs",
]

ANNOTATION_INTRA_NODE: Final = "gputopo.io/intra-node"
ANNOTATION_REQUIRED_TIER: Final = "gputopo.io/required-tier"
ANNOTATION_PREFERRED_TIER: Final = "gputopo.io/preferred-tier"
ANNOTATION_MIN_BUS_BANDWIDTH: Final = "gputopo.io/min-bus-bandwidth"
ANNOTATION_SLICE_SIZE: Final = "gputopo.io/slice-size"
ANNOTATION_EVICT_BARE_PODS: Final = "gputopo.io/evict-bare-pods"
# Per-rank GPU counts of a gang of bare pods (the plain pod contract), a comma list: "0,8,8,8".
ANNOTATION_GPUS_PER_RANK: Final = "gputopo.io/gpus-per-rank"
# Set by the operator on every pod it steers: the gang it was placed as ("<source>/<name>").
ANNOTATION_GANG: Final = group.ANNOTATION_GANG

# Kueue TAS (sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2/topology_types.go): a node label key.
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """What a pod's annotations say: the gang's needs, whether its bare pods may be evicted, what was refused."""

    needs: Needs
    evict_bare: bool = False
    problems: tuple[str, ...] = ()


def _tier(name: str, value: str, problems: list[str]) -> tuple[int | None, str | None]:
    """A tier named by index ("1") or by node label key ("topology.kubernetes.io/zone")."""
    text = value.strip()
    if text.isdigit() and text.isascii():
        index = whole_number(text, most=MAX_TIER)
        if index is None:
            problems.append(f"annotation {name}: {shown(value)} is not a tier index from 0 to {MAX_TIER}")
        return index, None
    if text and " " not in text and not text.startswith("-"):
        return None, text
    problems.append(f"annotation {name}: {shown(value)} is neither a tier index nor a node label key")
    return None, None


def read_needs(annotations: Mapping[str, str]) -> PodNeeds:
    """The needs a pod's annotations give its gang. Unknown values are problems; the rest still count."""
    problems: list[str] = []
    get = annotations.get

    intra = IntraNode.ANY
    raw = get(ANNOTATION_INTRA_NODE)
    if raw is not None:
        try:
            intra = IntraNode(raw.strip().lower())
        except ValueError:
            allowed = "|".join(v.value for v in IntraNode)
            problems.append(f"annotation {ANNOTATION_INTRA_NODE}: {shown(raw)} is not one of {allowed}")

    required_tier = preferred_tier = None
    required_label = preferred_label = None
    raw = get(ANNOTATION_REQUIRED_TIER)
    if raw is not None:
        required_tier, required_label = _tier(ANNOTATION_REQUIRED_TIER, raw, problems)
    raw = get(ANNOTATION_PREFERRED_TIER)
    if raw is not None:
        preferred_tier, preferred_label = _tier(ANNOTATION_PREFERRED_TIER, raw, problems)
    for name in (KUEUE_REQUIRED_TOPOLOGY, KUEUE_PREFERRED_TOPOLOGY):
        raw = get(name)
        if raw is None:
            continue
        key = raw.strip()
        if not key or " " in key:
            problems.append(f"annotation {name}: {shown(raw)} is not a node label key")
        elif name == KUEUE_REQUIRED_TOPOLOGY:
            required_label = required_label or key
        else:
            preferred_label = preferred_label or key

    busbw = 0.0
    raw = get(ANNOTATION_MIN_BUS_BANDWIDTH)
    if raw is not None:
        try:
            busbw = float(raw.strip())
        except ValueError:
            problems.append(f"annotation {ANNOTATION_MIN_BUS_BANDWIDTH}: {shown(raw)} is not a number of GB/s")
        if not math.isfinite(busbw) or busbw < 0:
            if math.isfinite(busbw):
                problems.append(f"annotation {ANNOTATION_MIN_BUS_BANDWIDTH}: {shown(raw)} is below 0 GB/s")
            else:
                problems.append(f"annotation {ANNOTATION_MIN_BUS_BANDWIDTH}: {shown(raw)} is not a number of GB/s")
            busbw = 0.0

    slice_size = None
    raw = get(ANNOTATION_SLICE_SIZE)
    if raw is not None:
        slice_size = whole_number(raw, most=MAX_GANG_SIZE) or None
        if slice_size is None:
            problems.append(
                f"annotation {ANNOTATION_SLICE_SIZE}: {shown(raw)} is not a whole number from 1 to {MAX_GANG_SIZE}"
            )

    evict = False
    raw = get(ANNOTATION_EVICT_BARE_PODS)
    if raw is not None:
        text = raw.strip().lower()
        if text in ("true", "false"):
            evict = text == "true"
        else:
            problems.append(f"annotation {ANNOTATION_EVICT_BARE_PODS}: {shown(raw)} is not true or false")

    needs = Needs(
        intra_node=intra,
        required_tier=required_tier,
        preferred_tier=preferred_tier,
        required_label=required_label,
        preferred_label=preferred_label,
        min_busbw_gbps=busbw,
        slice_size=slice_size,
    )
    return PodNeeds(needs, evict, tuple(problems))
