"""The one reading of ``nvidia.com/gpu`` in a pod spec: the operator, its validation and the probe's fake use it."""

from __future__ import annotations

from typing import Any

import pytest

from gputopo.api.gpus import GpuCountError, container_gpus, names_gpus, pod_gpus


def container(limits: Any = None, requests: Any = None, name: str = "trainer") -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = {"nvidia.com/gpu": limits}
    if requests is not None:
        resources["requests"] = {"nvidia.com/gpu": requests}
    return {"name": name, "resources": resources}


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([container(limits=2)], 2),
        ([container(limits="4")], 4),
        ([container(requests="1")], 1),
        ([container(limits=2, requests=8)], 2),
        ([container(limits=2), container(limits="2", name="sidecar")], 4),
        ([container(limits=0)], 0),
        ([container(limits=4.0)], 4),
        ([{"name": "app", "resources": {"limits": {"cpu": "2"}}}], None),
        ([{"name": "app"}], None),
        ([], None),
        (["not a container", {"resources": "odd"}], None),
    ],
    ids=[
        "int-limit",
        "string-limit",
        "request-alone",
        "limit-wins-over-request",
        "containers-add-up",
        "zero-named",
        "integral-float",
        "other-resources-only",
        "no-resources",
        "no-containers",
        "odd-shapes-name-none",
    ],
)
def test_pod_gpus(containers: list[Any], expected: int | None) -> None:
    assert pod_gpus({"containers": containers}) == expected


@pytest.mark.parametrize(
    "value",
    ["2.5", "2000m", -1, "-1", "two", True, 1.5, [2]],
    ids=["decimal", "milli", "negative", "negative-string", "word", "bool", "fraction", "list"],
)
def test_a_count_that_is_not_whole_names_the_container(value: Any) -> None:
    with pytest.raises(GpuCountError, match=r"^container sidecar: nvidia.com/gpu .* is not a whole number of GPUs$"):
        pod_gpus({"containers": [container(limits=1), container(limits=value, name="sidecar")]})


@pytest.mark.parametrize(
    ("entry", "named", "count"),
    [
        (container(limits=1), True, 1),
        (container(requests=0), True, 0),
        (container(), False, None),
        ({"resources": {"limits": None, "requests": {"nvidia.com/gpu": 3}}}, True, 3),
        ({"resources": {"limits": {"nvidia.com/gpu": None}, "requests": {"nvidia.com/gpu": 3}}}, True, 3),
        ({"resources": {"limits": {"nvidia.com/gpu": None}}}, False, None),
    ],
    ids=["limit", "zero-request", "neither", "null-limits", "null-limit-falls-to-request", "null-names-nothing"],
)
def test_names_gpus_and_container_gpus_agree(entry: dict[str, Any], named: bool, count: int | None) -> None:
    assert names_gpus(entry) is named
    assert container_gpus(entry) == count
