from __future__ import annotations

import pytest
from placement_builders import node, snapshot

from gputopo.api.trainingjob import IntraNode, TrainingJobSpec
from gputopo.placement import NodeSelectorOperator, Request, TaintEffect, WorkerAssignment
from gputopo.placement.types import Placement


def test_request_from_spec() -> None:
    spec = TrainingJobSpec.model_validate({
        "workers": 4, "gpusPerWorker": 8,
        "topology": {"intraNode": "nvswitch", "minBusBandwidthGBps": 100,
                     "interNode": {"requiredTier": 1, "preferredTier": 0}},
        "gpu": {"model": "H100", "sameDriver": True},
        "template": {"spec": {
            "containers": [{"name": "w"}],
            "nodeSelector": {"pool": "train"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]},
                                      {"key": "bad", "operator": "DoesNotExist"}]}]}}},
        }},
    })  # fmt: skip
    r = Request.from_spec(spec, name="ns/job")
    assert (r.workers, r.gpus_per_worker, r.total_gpus, r.intra_node) == (4, 8, 32, IntraNode.NVSWITCH)
    assert (r.min_busbw_gbps, r.required_tier, r.preferred_tier) == (100, 1, 0)
    assert (r.gpu_model, r.same_model, r.same_driver) == ("H100", True, True)
    assert r.node_selector == {"pool": "train"}
    assert [q.operator for q in r.affinity_terms[0]] == [NodeSelectorOperator.GT, NodeSelectorOperator.DOES_NOT_EXIST]
    assert r.tolerations[0].effect is TaintEffect.NO_SCHEDULE


def test_reserve_returns_a_new_snapshot_and_release_undoes_it() -> None:
    snap = snapshot(node("a"), node("b"))
    placement = Placement((WorkerAssignment(0, "a", (0, 1)),), 1.0, "")
    taken = snap.reserve(placement)
    assert snap.node("a").free_gpus == frozenset(range(8))
    assert taken.node("a").free_gpus == frozenset(range(2, 8))
    assert taken.release(placement).node("a").free_gpus == frozenset(range(8))
    with pytest.raises(ValueError, match="already used"):
        taken.reserve(placement)


@pytest.mark.parametrize(
    ("op", "values", "labels", "ok"),
    [
        ("In", ("a",), {"k": "a"}, True),
        ("In", ("a",), {}, False),
        ("NotIn", ("a",), {"k": "a"}, False),
        ("NotIn", ("a",), {}, True),
        ("Exists", (), {"k": ""}, True),
        ("DoesNotExist", (), {"k": "x"}, False),
        ("Gt", ("3",), {"k": "4"}, True),
        ("Gt", ("3",), {"k": "x"}, False),
        ("Lt", ("3",), {"k": "2"}, True),
        ("Lt", ("3",), {"k": "3"}, False),
    ],
    ids=["in", "in-missing", "notin", "notin-missing", "exists", "doesnotexist", "gt", "gt-nan", "lt", "lt-equal"],
)
def test_node_selector_operators(op: str, values: tuple[str, ...], labels: dict[str, str], ok: bool) -> None:
    from gputopo.placement import NodeSelectorRequirement

    assert NodeSelectorRequirement("k", NodeSelectorOperator(op), values).matches(labels) is ok
