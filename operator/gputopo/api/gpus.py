"""How many GPUs a pod asks for: the one reading of ``nvidia.com/gpu`` in a pod spec.

Per container its limit counts, or its request where no limit is set (the API server requires the two to
be equal for an extended resource when both are given, and defaults the request to the limit); containers
add up. Init containers are not counted: the device plugin gives the app containers the devices. A count
is a whole number, as an int or a decimal string ("2"); anything else is an error that names the container.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputopo.api.fields import shown, whole_number
from gputopo.api.group import GPU_RESOURCE
from gputopo.errors import GputopoError

__all__ = ["GpuCountError", "container_gpus", "names_gpus", "pod_gpus"]


class GpuCountError(GputopoError, ValueError):
    """A container's ``nvidia.com/gpu`` is not a whole number of GPUs."""


def _resources(container: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}, {}
    limits, requests = resources.get("limits"), resources.get("requests")
    return (
        limits if isinstance(limits, Mapping) else {},
        requests if isinstance(requests, Mapping) else {},
    )


def _count(value: Any) -> int | None:
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    return whole_number(value)


def names_gpus(container: Any) -> bool:
    """Whether the container's limits or requests give ``nvidia.com/gpu`` a value (a null one names nothing)."""
    return _value(container) is not None


def _value(container: Any) -> Any:
    limits, requests = _resources(container)
    value = limits.get(GPU_RESOURCE)
    return requests.get(GPU_RESOURCE) if value is None else value


def container_gpus(container: Any) -> int | None:
    """The container's GPU count; None when it names none. Raises GpuCountError on a count that is not whole."""
    value = _value(container)
    if value is None:
        return None
    count = _count(value)
    if count is None:
        name = container.get("name") if isinstance(container, Mapping) else None
        named = name if isinstance(name, str) and 0 < len(name) <= 63 else shown(name) if name else "?"
        raise GpuCountError(f"container {named}: {GPU_RESOURCE} {shown(value)} is not a whole number of GPUs")
    return count


def pod_gpus(pod_spec: Mapping[str, Any]) -> int | None:
    """The GPUs a pod spec's containers request in all; None when none names ``nvidia.com/gpu``.

    Raises GpuCountError, naming the container, on a count that is not a whole number.
    """
    containers = pod_spec.get("containers")
    total: int | None = None
    for container in containers if isinstance(containers, list) else ():
        count = container_gpus(container)
        if count is not None:
            total = (total or 0) + count
    return total
