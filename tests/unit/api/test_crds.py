"""The committed CRDs are what the models generate, and they are structural."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.api import crdgen

CRD_DIR = Path(__file__).parents[3] / "crds"


@pytest.mark.parametrize("name", sorted(crdgen.crds()), ids=str)
def test_committed_crd_matches_models(name: str) -> None:
    committed = (CRD_DIR / name).read_text()
    assert committed == crdgen.render(crdgen.crds()[name]), (
        f"crds/{name} has drifted from gputopo.api; run `python -m gputopo.api.crdgen --out crds`"
    )


def _walk(schema: dict[str, Any], path: str = "") -> list[str]:
    """Places where a schema is not structural: refs, unions, or objects without properties or preserve."""
    bad = []
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "additionalProperties", "title"):
        if forbidden in schema:
            bad.append(f"{path or '.'}: {forbidden}")
    if schema.get("type") is None and "x-kubernetes-preserve-unknown-fields" not in schema:
        bad.append(f"{path or '.'}: no type")
    for name, sub in schema.get("properties", {}).items():
        bad += _walk(sub, f"{path}.{name}")
    if "items" in schema:
        bad += _walk(schema["items"], f"{path}[]")
    return bad


@pytest.mark.parametrize("name", sorted(crdgen.crds()), ids=str)
def test_schema_is_structural(name: str) -> None:
    crd = yaml.safe_load(crdgen.render(crdgen.crds()[name]))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []


def test_trainingjob_crd_names_and_columns() -> None:
    crd = crdgen.crds()["trainingjobs.yaml"]
    assert crd["spec"]["names"]["shortNames"] == ["tj"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase",
        "Workers",
        "GPUs",
        "BusBW",
        "Restarts",
        "Age",
    ]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("gpusPerWorker" in r for r in rules)
    inter = spec["properties"]["topology"]["properties"]["interNode"]
    assert "preferredTier <= self.requiredTier" in inter["x-kubernetes-validations"][0]["rule"]


def test_nested_defaults_apply() -> None:
    spec = crdgen.crds()["trainingjobs.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["failurePolicy"]["default"] == {}
    assert spec["properties"]["failurePolicy"]["properties"]["maxRestarts"]["default"] == 3
    assert spec["properties"]["topology"]["properties"]["intraNode"]["default"] == "any"


def test_nodetopology_is_cluster_scoped() -> None:
    crd = crdgen.crds()["nodetopologies.yaml"]
    assert crd["spec"]["scope"] == "Cluster"
    assert "spec" not in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
