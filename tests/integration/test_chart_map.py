"""The chart's optional live map (`map.enabled`): off by default; on, a Deployment of the operator's image running
`gputopo ui` with the operator's tier labels, rights to get and list only what the map draws, and a Service."""

from __future__ import annotations

from typing import Any

from chart_helpers import CHART, RELEASE, SANDBOX_VALUES, find, helm, render

from gputopo.cli.live import KINDS

MAP = f"{RELEASE}-map"
ON = [*SANDBOX_VALUES, "--set", "map.enabled=true"]


def _map_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "map"]


def test_the_map_is_off_by_default() -> None:
    assert _map_objects(render(*SANDBOX_VALUES)) == []


def test_on_it_serves_gputopo_ui_with_the_operators_tiers_and_read_only_rights() -> None:
    docs = render(*ON, "--set", "operator.config.tierLabels={rack,block}", "--set", "map.port=9000")
    kinds = sorted(d["kind"] for d in _map_objects(docs))
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]
    deployment = find(docs, "Deployment", MAP)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "gputopo", "ui", "--address=0.0.0.0", "--port=9000", "--interval=5", "--tier-labels=rack,block"
    ]  # fmt: skip
    assert (
        container["image"]
        == find(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert find(docs, "Service", MAP)["spec"]["ports"][0]["port"] == 9000
    rules = find(docs, "ClusterRole", MAP)["rules"]
    assert all(rule["verbs"] == ["get", "list"] for rule in rules)
    granted = {r for rule in rules for r in rule["resources"]}
    # exactly what the map lists (gputopo.cli.live.KINDS), by plural
    assert granted == {path.rsplit("/", 1)[1] for _, path in KINDS.values()}


def test_a_port_out_of_range_is_refused() -> None:
    out = helm("template", RELEASE, str(CHART), *ON, "--set", "map.port=0")
    assert out.returncode != 0 and "/map/port" in out.stderr
