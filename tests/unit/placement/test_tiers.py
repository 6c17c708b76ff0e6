"""Network tiers: switches named by their path, tiers the cluster lacks refused, and the words of refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from placement_builders import TIER0, TIER1, NodeBuilder, node, snapshot
from typer.testing import CliRunner

from gputopo.cli.main import app
from gputopo.control.facts import job_facts
from gputopo.control.validation import problems
from gputopo.placement import Placement, Request, Unplaceable, place
from gputopo.placement.network import tier_summary
from gputopo.placement.types import plural
from gputopo.sim.exact import optimum
from gputopo.sim.peers import place_tier_binpack


def racked(name: str, rack: str | None, block: str | None) -> NodeBuilder:
    """A node labelled like Kueue's default test topology: racks named per block."""
    built = node(name)
    if rack is not None:
        built = built.label(TIER0, rack)
    if block is not None:
        built = built.label(TIER1, block)
    return built


@pytest.mark.parametrize(
    ("rack", "block", "expected"),
    [
        ("rack-1", "block-1", ("block-1/rack-1", "block-1")),
        (None, None, ("node/n", "node/n")),
        ("rack-1", None, ("rack-1", "node/n")),
        (None, "block-1", ("node/n", "block-1")),
    ],
    ids=["rack-and-block", "no-labels-alone-at-every-tier", "rack-without-block", "block-without-rack"],
)
def test_domain_is_named_by_its_path_from_the_top(
    rack: str | None, block: str | None, expected: tuple[str, ...]
) -> None:
    assert snapshot(racked("n", rack, block)).domains[0] == expected


def test_same_rack_name_in_two_blocks_is_two_racks() -> None:
    snap = snapshot(racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-2"))
    result = place(snap, Request(2, 8))
    assert isinstance(result, Placement)
    # Not "one tier-0 switch rack-1": the gang spans the top tier and pays its oversubscription.
    assert (result.tier, result.tier_domain) == (None, None)
    single = place(snapshot(racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-1")), Request(2, 8))
    assert isinstance(single, Placement) and single.tier == 0
    assert result.busbw_gbps == pytest.approx(single.busbw_gbps / snap.tiers.beyond_top)


@pytest.mark.parametrize(
    "policy",
    [place, place_tier_binpack],
    ids=["gputopo", "tier-binpack"],
)
def test_required_tier_0_is_refused_across_blocks_with_the_same_rack_name(policy: object) -> None:
    snap = snapshot(racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-2"))
    assert callable(policy)
    assert isinstance(policy(snap, Request(2, 8, required_tier=0)), Unplaceable)
    assert optimum(snap, Request(2, 8, required_tier=0)) is None


def test_gang_takes_the_rack_that_really_is_one() -> None:
    snap = snapshot(
        racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-2"), racked("c", "rack-1", "block-1")
    )
    result = place(snap, Request(2, 8))
    assert isinstance(result, Placement)
    assert set(result.nodes) == {"a", "c"}
    assert (result.tier, result.tier_domain) == (0, "block-1/rack-1")


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (
            Request(6, 1, required_tier=2),
            "topology.interNode.requiredTier 2 names a tier this cluster does not have (it has 2 network tiers: "
            "tiers 0..1)",
        ),
        (Request(2, 8, preferred_tier=5), "topology.interNode.preferredTier 5 names a tier"),
        (Request(2, 8, required_tier=7, preferred_tier=3), "requiredTier 7 names a tier"),
    ],
    ids=["required-above-top", "preferred-above-top", "both-above-top"],
)
def test_tier_above_the_configured_tiers_is_refused_not_clamped(request_: Request, words: str) -> None:
    snap = snapshot(*(racked(f"n{i}", "rack-1", "block-1") for i in range(7)))
    for policy in (place, place_tier_binpack):
        result = policy(snap, request_)
        assert isinstance(result, Unplaceable)
        assert words in str(result)
        assert "the cluster has" not in str(result)
    assert optimum(snap, request_) is None


@pytest.mark.parametrize(
    ("snap_nodes", "request_", "words"),
    [
        ([racked("a", "r", "b").used(*range(8))], Request(1, 1), "needs 1 node with 1 free GPU; no node has them"),
        ([racked("a", "r", "b").used(*range(8))], Request(1, 1), "(1 no free GPU)"),
        ([racked("a", "r", "b").used(0)], Request(1, 8), "1 node lacks 8 free healthy GPUs"),
        ([racked("a", "r", "b").used(0), racked("c", "r", "b").used(1)], Request(1, 8), "2 nodes lack 8 free"),
        (
            [racked(f"n{i}", f"rack-{i}", "block-1") for i in range(3)],
            Request(3, 4, required_tier=0),
            "needs 3 groups of 4 free GPUs under one tier-0 switch; the largest such domain has 2",
        ),
    ],
    ids=["one-node-one-gpu", "filter-count", "one-node-lacks", "two-nodes-lack", "groups-under-tier-0"],
)
def test_refusals_use_the_right_number(snap_nodes: list[NodeBuilder], request_: Request, words: str) -> None:
    result = place(snapshot(*snap_nodes), request_)
    assert isinstance(result, Unplaceable)
    assert words in str(result)


@pytest.mark.parametrize(
    ("count", "noun", "words"),
    [(1, "node", "1 node"), (2, "node", "2 nodes"), (0, "GPU", "0 GPUs"), (3, "switch", "3 switches")],
    ids=["one", "two", "zero", "es-plural"],
)
def test_plural(count: int, noun: str, words: str) -> None:
    assert plural(count, noun) == words


def test_tier_summary_names_the_nodes_without_a_label() -> None:
    snap = snapshot(
        racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-2"), racked("c", None, "block-1"),
        racked("d", None, None),
    )  # fmt: skip
    tier0, tier1 = tier_summary(snap)
    assert (tier0.switches, tier0.largest_switch_nodes, tier0.nodes_without_label) == (2, 1, ("c", "d"))
    assert (tier1.switches, tier1.largest_switch_nodes, tier1.nodes_without_label) == (2, 2, ("d",))


def _write(tmp_path: Path, cluster: dict[str, object], job: dict[str, object]) -> tuple[Path, Path]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path / "cluster.yaml", tmp_path / "job.yaml"


def test_plan_json_shows_the_nodes_alone_at_a_tier(tmp_path: Path) -> None:
    cluster = {
        "nodes": [
            {"name": "a", "type": "hgx-h100", "labels": {TIER0: "rack-1", TIER1: "block-1"}},
            {"name": "b", "type": "hgx-h100", "labels": {TIER1: "block-1"}},
        ]
    }
    job = {"workers": 2, "gpusPerWorker": 8, "template": {"spec": {"containers": [{"name": "w"}]}}}
    cluster_path, job_path = _write(tmp_path, cluster, job)
    result = CliRunner().invoke(app, ["plan", "--job", str(job_path), "--cluster", str(cluster_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    tiers = doc["network"]["tiers"]
    assert [t["nodesWithoutLabel"] for t in tiers] == [["b"], []]
    assert (doc["tier"], doc["tierDomain"]) == (1, "block-1")


def test_plan_refuses_a_tier_the_cluster_lacks_in_the_operators_words(tmp_path: Path) -> None:
    cluster = {"nodes": [{"name": f"n{i}", "type": "hgx-h100"} for i in range(2)]}
    job = {
        "workers": 2, "gpusPerWorker": 8, "topology": {"interNode": {"requiredTier": 3}},
        "template": {"spec": {"containers": [{"name": "w"}]}},
    }  # fmt: skip
    cluster_path, job_path = _write(tmp_path, cluster, job)
    result = CliRunner().invoke(app, ["plan", "--job", str(job_path), "--cluster", str(cluster_path)])
    # Invalid input, as the operator marks the job Invalid: exit 2 with the operator's words, on one line.
    assert result.exit_code == 2
    words = "requiredTier 3 names a tier this cluster does not have (it has 2 network tiers: tiers 0..1)"
    assert result.stderr == f"error: {job_path}: topology.interNode.{words}\n"


@pytest.mark.parametrize(
    ("inter_node", "field"),
    [({"requiredTier": 2}, "requiredTier 2"), ({"preferredTier": 4}, "preferredTier 4")],
    ids=["required", "preferred"],
)
def test_operator_marks_the_job_invalid_in_the_engines_words(inter_node: dict[str, int], field: str) -> None:
    body = {
        "metadata": {"namespace": "ns", "name": "tj"},
        "spec": {
            "workers": 2, "gpusPerWorker": 8, "topology": {"interNode": inter_node},
            "template": {"spec": {"containers": [{"name": "w"}]}},
        },
    }  # fmt: skip
    facts = job_facts(body)
    assert facts.spec is not None
    snap = snapshot(racked("a", "rack-1", "block-1"), racked("b", "rack-1", "block-1"))
    refused = place(snap, Request.from_spec(facts.spec))
    assert isinstance(refused, Unplaceable)
    found = problems(facts, snap.tiers)
    assert found == [refused.reason] and field in refused.reason
