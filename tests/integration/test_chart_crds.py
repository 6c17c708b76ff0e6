"""The chart ships the same CRDs as crds/, and renders them with the upgrade path its values ask for.

When this fails after regenerating crds/ (`python -m gputopo.api.crdgen`), run `hack/sync-chart-crds.sh`.
These tests need the helm binary only, not the sandbox.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, helm_binary

CRDS = Path(__file__).parents[2] / "crds"
CHART_CRDS = CHART / "files" / "crds"
KEEP = "helm.sh/resource-policy"


def render_crds(*args: str) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [str(helm_binary()), "template", "crd-test", str(CHART), "--show-only", "templates/crds.yaml", *args],
        capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode != 0 and "could not find template" in out.stderr:
        return {}  # the template rendered nothing
    assert out.returncode == 0, out.stderr
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(out.stdout) if doc}


def source_crds() -> dict[str, dict[str, Any]]:
    docs = [doc for path in sorted(CRDS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return {doc["metadata"]["name"]: doc for doc in docs}


def test_chart_holds_a_byte_for_byte_copy_of_crds_dir() -> None:
    source = {p.name: p.read_bytes() for p in CRDS.glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    assert source, "crds/ is empty; run `python -m gputopo.api.crdgen`"
    assert sorted(chart) == sorted(source), "run hack/sync-chart-crds.sh: the chart's CRD files differ from crds/"
    drifted = [name for name in source if chart[name] != source[name]]
    assert not drifted, f"run hack/sync-chart-crds.sh: {drifted} changed in crds/ but not in the chart"


def test_rendered_crds_equal_the_source_apart_from_helm_metadata() -> None:
    rendered = render_crds()
    source = source_crds()
    assert sorted(rendered) == sorted(source)
    for name, crd in rendered.items():
        meta = crd["metadata"]
        assert meta["annotations"][KEEP] == "keep", name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm", name
        stripped = {**crd, "metadata": {k: v for k, v in meta.items() if k not in ("annotations", "labels")}}
        want = source[name]
        want = {**want, "metadata": {k: v for k, v in want["metadata"].items() if k not in ("annotations", "labels")}}
        assert stripped == want, f"{name}: the chart renders a different CRD than crds/ holds"


CASES = [
    ("defaults-keep-on-uninstall", [], True, True),
    ("keep-off", ["--set", "crds.keep=false"], True, False),
    ("crds-managed-elsewhere", ["--set", "crds.enabled=false", "--set", "crds.keep=false",
                                "--set", "operator.leaderElection.createPeering=false"], False, False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "rendered", "kept"), CASES, ids=[c[0] for c in CASES])
def test_crd_upgrade_path_follows_values(case: str, args: list[str], rendered: bool, kept: bool) -> None:
    crds = render_crds(*args)
    assert bool(crds) is rendered, case
    for name, crd in crds.items():
        assert (crd["metadata"].get("annotations", {}).get(KEEP) == "keep") is kept, name


def test_kopf_peering_crds_can_be_left_to_another_operator() -> None:
    with_kopf = render_crds()
    without = render_crds("--set", "crds.kopfPeering=false", "--api-versions", "kopf.dev/v1/ClusterKopfPeering")
    assert {n for n in with_kopf if n.endswith(".kopf.dev")}, "the chart ships no kopf peering CRDs"
    assert not {n for n in without if n.endswith(".kopf.dev")}
    assert {n for n in without if n.endswith(".gputopo.io")} == {n for n in with_kopf if n.endswith(".gputopo.io")}
