"""GangPlacement: the model reads what the operator writes, and its CRD is what `kubectl get gangs` needs."""

from typing import Any, get_args

import pytest
from pydantic import ValidationError

from gputopo.api import crdgen
from gputopo.api.gangplacement import GangPhase, GangPlacement, GangSource
from gputopo.gangs.model import Source

PLACED: dict[str, Any] = {
    "apiVersion": "gputopo.io/v1alpha1",
    "kind": "GangPlacement",
    "metadata": {"name": "job-trainer", "namespace": "team-a"},
    "spec": {
        "source": "job",
        "gang": "trainer",
        "size": 2,
        "owner": {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "3f2a"},
    },
    "status": {
        "phase": "Running",
        "generation": 1,
        "ranks": [
            {"rank": 0, "pod": "trainer-0-abcde", "node": "gpu-a", "gpus": [0, 1, 2, 3]},
            {"rank": 1, "pod": "trainer-1-fghij", "node": "gpu-b", "gpus": [4, 5, 6, 7]},
        ],
        "nodes": ["gpu-a", "gpu-b"],
        "nodeCount": 2,
        "gpuCount": 8,
        "estimatedBusBandwidthGBps": 48.5,
        "bottleneck": "inter-node NIC",
        "tier": 0,
        "restarts": 0,
        "plannedAt": "2026-12-04T20:00:00Z",
        "conditions": [{"type": "Placed", "status": "True", "reason": "Planned"}],
        "aNewerField": "read tolerantly",
    },
}


def _crd() -> dict[str, Any]:
    return crdgen.crds()["gangplacements.yaml"]


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_reads_a_placed_gang_and_writes_it_back_in_camel_case() -> None:
    gang = GangPlacement.model_validate(PLACED)
    assert (gang.namespace, gang.name) == ("team-a", "job-trainer")
    assert gang.spec.source is GangSource.JOB and gang.spec.owner is not None
    assert gang.status.phase is GangPhase.RUNNING
    assert [r.gpus for r in gang.status.ranks] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    out = gang.status.to_api()
    assert out["estimatedBusBandwidthGBps"] == 48.5 and out["nodeCount"] == 2
    assert "aNewerField" not in out


def test_sources_are_the_gang_models_sources() -> None:
    assert {s.value for s in GangSource} == set(get_args(Source))


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"phase": "Bogus"}, "phase"),
        ({"restarts": -1}, "restarts"),
        ({"ranks": [{"rank": -1, "node": "gpu-a"}]}, "ranks.0.rank"),
        ({"missingRanks": [-2]}, "missingRanks.0"),
    ],
    ids=["unknown-phase", "negative-restarts", "negative-rank", "negative-missing-rank"],
)
def test_a_bad_status_names_the_field(status: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        GangPlacement.model_validate({**PLACED, "status": status})
    assert field in str(info.value)


def test_crd_names_columns_and_subresource() -> None:
    crd = _crd()
    names = crd["spec"]["names"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert (names["plural"], names["shortNames"]) == ("gangplacements", ["gang", "gangs"])
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Source", "Gang", "Phase", "Nodes", "GPUs", "BusBW", "Restarts", "Age"]
    assert columns["Nodes"] == ".status.nodeCount" and columns["GPUs"] == ".status.gpuCount"


def test_crd_schema_checks_phase_counts_and_identity() -> None:
    schema = _schema()
    assert schema["required"] == ["spec"]
    spec, status = schema["properties"]["spec"], schema["properties"]["status"]
    assert spec["required"] == ["source", "gang"]
    assert "oldSelf.source" in spec["x-kubernetes-validations"][0]["rule"]
    assert status["properties"]["phase"]["enum"] == [p.value for p in GangPhase]
    for count in ("generation", "restarts", "nodeCount", "gpuCount", "tier", "estimatedBusBandwidthGBps"):
        assert status["properties"][count]["minimum"] == 0, count
    assert status["properties"]["ranks"]["x-kubernetes-list-map-keys"] == ["rank"]
    assert "status.nodeCount" in status["x-kubernetes-validations"][0]["message"]
