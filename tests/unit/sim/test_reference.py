"""The reference optimum is independent of the engine: an exhaustive search and an ILP that share only the
estimator agree with each other, the engine never beats them, and the ILP keeps `--json` output clean."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gputopo.api.trainingjob import IntraNode
from gputopo.cli.main import app
from gputopo.placement import NodeInfo, Placement, Request, Snapshot, place
from gputopo.sim import exact
from gputopo.sim.exact import exhaustive_optimum, exhaustive_size, optimum
from gputopo.sim.exact_ilp import ilp_optimum
from gputopo.sim.generate import generate_cluster
from gputopo.topology.catalog import NODE_TYPES, load_node_type

TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
TYPES = sorted(t for t in NODE_TYPES if "gb200" not in t)


@st.composite
def small_clusters(draw: st.DrawFn) -> Snapshot:
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        topology = load_node_type(draw(st.sampled_from(TYPES)))
        used = draw(st.frozensets(st.integers(0, topology.gpu_count - 1), min_size=2))
        labels = {TIER0: draw(st.sampled_from(["l0", "l1"])), TIER1: "s0"}
        nodes.append(NodeInfo(f"n{i}", topology, labels, used_gpus=used))
    return Snapshot(nodes)


requests = st.builds(
    Request,
    workers=st.integers(1, 3),
    gpus_per_worker=st.sampled_from([1, 2, 4]),
    intra_node=st.sampled_from(list(IntraNode)),
    required_tier=st.sampled_from([None, 0, 1]),
    same_model=st.booleans(),
)


@settings(max_examples=80, deadline=None)
@given(small_clusters(), requests)
def test_exhaustive_search_and_ilp_agree_and_the_engine_never_beats_them(snap: Snapshot, request: Request) -> None:
    if exhaustive_size(snap, request) > 50_000:
        return
    walked = exhaustive_optimum(snap, request)
    solved = ilp_optimum(snap, request)
    assert (walked is None) == (solved is None)
    if walked is not None and solved is not None:
        assert solved == pytest.approx(walked, rel=1e-9)
    result = place(snap, request)
    if isinstance(result, Placement):
        assert walked is not None and result.busbw_gbps <= walked + 1e-9


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (Request(2, 8), 376.0),
        (Request(2, 8, required_tier=0), 376.0),
        (Request(4, 8), 376.0 / 2.0),  # only 3 free whole nodes per leaf: the gang spans the spine
        (Request(1, 8), None),
    ],
    ids=["two-nodes-one-leaf", "required-leaf", "spans-the-spine", "no-node-has-8-free"],
)
def test_reference_by_case(request_: Request, expected: float | None) -> None:
    def h100(name: str, leaf: str, used: frozenset[int]) -> NodeInfo:
        return NodeInfo(name, load_node_type("hgx-h100"), {TIER0: leaf, TIER1: "s0"}, used_gpus=used)

    nodes = [h100(f"a{i}", "l0", frozenset()) for i in range(3)] + [h100("b0", "l1", frozenset())]
    snap = Snapshot(nodes)
    if expected is None:
        snap = Snapshot([h100("c0", "l0", frozenset({0}))])
    for solver in (exhaustive_optimum, ilp_optimum):
        got = solver(snap, request_)
        if expected is None:
            assert got is None
        else:
            assert got == pytest.approx(expected, rel=1e-3)


def test_ilp_takes_the_medium_instances_and_matches_the_engine_there() -> None:
    snap = generate_cluster(random.Random(11), 64, used_share=0.15)
    request = Request(4, 4)
    assert exhaustive_size(snap, request) > exact.EXHAUSTIVE_LIMIT
    result = place(snap, request)
    assert isinstance(result, Placement)
    assert optimum(snap, request) == pytest.approx(result.busbw_gbps, rel=1e-9)


def test_ilp_refuses_multi_node_nvlink_domains() -> None:
    clique = {"nvidia.com/gpu.clique": "rack-1"}
    trays = [NodeInfo(f"t{i}", load_node_type("gb200-tray"), clique) for i in range(2)]
    with pytest.raises(ValueError, match="NVLink domains"):
        ilp_optimum(Snapshot(trays), Request(2, 4))


def test_plan_json_stays_one_document_when_the_ilp_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact, "EXHAUSTIVE_LIMIT", 0)
    cluster = {"nodes": [{"name": f"n{i}", "type": "hgx-h100", "labels": {TIER0: "l0"}} for i in range(3)]}
    job = {"workers": 2, "gpusPerWorker": 8, "template": {"spec": {"containers": [{"name": "w"}]}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "j.yaml").write_text(yaml.safe_dump(job))
    result = CliRunner().invoke(app, ["plan", "--job", str(tmp_path / "j.yaml"), "--cluster", str(tmp_path / "c.yaml"),
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["optimalBusBandwidthGBps"] == pytest.approx(doc["placement"]["estimatedBusBandwidthGBps"], rel=1e-3)
