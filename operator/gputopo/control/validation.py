"""What the CRD schema and its CEL rules cannot say about a TrainingJob; each problem in plain words.

The schema checks each field; these checks need the job's name, the operator's settings, or the pod
template's semantics. A job with problems gets ``Invalid=True`` and waits for a fixed spec.
"""

from __future__ import annotations

import re
from typing import Any

from gputopo.api.gpus import GpuCountError, pod_gpus
from gputopo.api.group import GPU_RESOURCE
from gputopo.api.trainingjob import TrainingJobSpec
from gputopo.control.facts import JobFacts
from gputopo.placement.template import template_problem
from gputopo.placement.types import TierConfig

__all__ = ["problems"]

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_MAX_LABEL = 63


def _gpus_in_template(spec: TrainingJobSpec) -> int | None:
    """The template's GPU count, -1 for a count that is not whole, None when no container names GPUs."""
    pod = spec.template.get("spec")
    try:
        return pod_gpus(pod if isinstance(pod, dict) else {})
    except GpuCountError:
        return -1


def problems(job: JobFacts, tiers: TierConfig) -> list[str]:
    if job.spec is None:
        return [job.spec_error or "spec does not parse"]
    spec = job.spec
    found: list[str] = []
    if not _DNS_1035.match(job.name):
        found.append(
            f"name {job.name!r} must be a DNS-1035 label (lower case letters, digits, '-', starting with a "
            "letter): it names the gang's headless Service"
        )
    longest = f"{job.name}-{spec.workers - 1}"
    if len(longest) > _MAX_LABEL:
        found.append(f"pod hostname {longest!r} would be longer than {_MAX_LABEL} characters; shorten the name")
    inter = spec.topology.inter_node
    # The same words `gputopo plan` and the engine refuse with.
    found.extend(tiers.unknown_tiers(inter.required_tier, inter.preferred_tier))
    shape = template_problem(spec.template)
    if shape is not None:
        # The rest reads the template; a field of the wrong shape is the one problem to fix first.
        return [*found, f"spec.{shape}"]
    pod: dict[str, Any] = spec.template.get("spec") or {}
    if pod.get("restartPolicy") == "Always":
        found.append("template.spec.restartPolicy Always would never let a worker finish; use Never or OnFailure")
    if pod.get("nodeName"):
        found.append("template.spec.nodeName is set; gputopo chooses the nodes")
    if pod.get("schedulingGates"):
        found.append("template.spec.schedulingGates is set; gputopo hands the gang's pods to kube-scheduler itself")
    requested = _gpus_in_template(spec)
    if requested is not None and requested != spec.gpus_per_worker:
        found.append(
            f"the template's containers request {requested if requested >= 0 else 'a non-integer count of'} "
            f"{GPU_RESOURCE} but gpusPerWorker is {spec.gpus_per_worker}"
        )
    slice_size = spec.topology.slice_size
    if slice_size is not None and spec.workers % slice_size:
        found.append(
            f"topology.sliceSize {slice_size} does not divide workers {spec.workers}: every NVLink domain takes "
            "whole slices"
        )
    return found
