"""steer_patch applies (jsonpatch, with the API server's reading of a ``test`` of ``null``) and gives a pod the API
server accepts while gated: its required node affinity only grows (the rules of k8s v1.37.2
validateNodeAffinityMutation, mirrored below); a map it adds whole is not added over one put there meanwhile."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer
import pytest
from gang_builders import pod

from gputopo.gangs.model import GATE, GangId
from gputopo.gangs.steer import NotGatedError, release_patch, steer_patch

GANG = GangId("team-a", "jobset", "llama")
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PIN = {"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}


def _terms(p: dict[str, Any]) -> list[dict[str, Any]] | None:
    required = p["spec"].get("affinity", {}).get("nodeAffinity", {}).get(REQ)
    return None if required is None else required.get("nodeSelectorTerms", [])


def only_additions(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """k8s v1.37.2 pkg/apis/core/validation: validateNodeAffinityMutation and
    validateNodeSelectorTermHasOnlyAdditions, for a gated pod."""
    old_terms, new_terms = _terms(old), _terms(new) or []
    if not old_terms:
        return True
    if len(old_terms) != len(new_terms):
        return False
    for o, n in zip(old_terms, new_terms, strict=True):
        for part in ("matchExpressions", "matchFields"):
            before, after = o.get(part) or [], n.get(part) or []
            if not o.get("matchExpressions") and not o.get("matchFields") and after:
                return False
            if after[: len(before)] != before:
                return False
    return True


_ABSENT = object()


def apply_as_the_api_server(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``jsonpatch`` as the API server applies a JSON patch: a ``test`` of ``null`` passes while its path is absent
    and fails once anything is there (tests/integration/test_gang_io.py shows it on the real server); jsonpatch
    itself fails such a test on an absent path."""
    out = copy.deepcopy(doc)
    for op in patch:
        absent = jsonpointer.resolve_pointer(out, op["path"], _ABSENT) is _ABSENT
        if op["op"] == "test" and op.get("value") is None and absent:
            continue
        out = jsonpatch.apply_patch(out, [op])
    return out


def _apply(p: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    new = apply_as_the_api_server(p, patch)
    assert only_additions(p, new)
    return new


CASES = {
    "no affinity": ({}, [{"matchFields": [PIN]}]),
    "pod affinity only": ({"podAffinity": {}}, [{"matchFields": [PIN]}]),
    "preferred only": (
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        [{"matchFields": [PIN]}],
    ),
    "two terms": (
        {
            "nodeAffinity": {
                REQ: {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]},
                    ]
                }
            }
        },
        [
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}], "matchFields": [PIN]},
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}, PIN]},
        ],
    ),
    "an empty term stays empty": (
        {
            "nodeAffinity": {
                REQ: {"nodeSelectorTerms": [{}, {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}
            }
        },
        [{}, {"matchExpressions": [{"key": "a", "operator": "Exists"}], "matchFields": [PIN]}],
    ),
    "empty term list": ({"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}}, [{"matchFields": [PIN]}]),
}


@pytest.mark.parametrize(("affinity", "terms"), CASES.values(), ids=CASES.keys())
def test_steer_pins_every_required_term_and_lifts_the_gate(affinity: dict[str, Any], terms: list[Any]) -> None:
    built = pod("llama-workers-0-0-x7k2p").gpus(8).gates("example.com/other", GATE)
    if affinity:
        built.spec("affinity", affinity)
    before = built.build()
    after = _apply(before, steer_patch(before, "gpu-7", (0, 1, 2, 3), 3, GANG))
    assert _terms(after) == terms
    assert after["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert after["metadata"]["annotations"] == {
        "gputopo.io/gpus": "0,1,2,3",
        "gputopo.io/placement-generation": "3",
        "gputopo.io/gang-id": "jobset/llama",
    }


def test_pod_without_annotations_gets_them_all() -> None:
    before = pod("p").gpus(8).build()
    del before["metadata"]["annotations"]
    after = _apply(before, steer_patch(before, "gpu-7", (4,), 1, GANG))
    assert after["metadata"]["annotations"]["gputopo.io/gpus"] == "4"
    assert after["spec"]["schedulingGates"] == []


def test_a_concurrent_gate_change_fails_the_patch_instead_of_removing_another_gate() -> None:
    before = pod("p").gpus(8).gates("kueue.x-k8s.io/topology", GATE).build()
    patch = steer_patch(before, "gpu-7", (0,), 1, GANG)
    raced = copy.deepcopy(before)
    raced["spec"]["schedulingGates"] = [{"name": GATE}]  # Kueue lifted its gate meanwhile: indices moved
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_as_the_api_server(raced, patch)


def test_annotations_put_on_the_pod_since_it_was_read_fail_the_patch_instead_of_being_replaced() -> None:
    before = pod("p").gpus(8).build()
    del before["metadata"]["annotations"]
    patch = steer_patch(before, "gpu-7", (4,), 1, GANG)
    raced = copy.deepcopy(before)
    raced["metadata"]["annotations"] = {"example.com/team": "vision"}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_as_the_api_server(raced, patch)


def test_an_affinity_put_on_the_pod_since_it_was_read_fails_the_patch_instead_of_being_replaced() -> None:
    before = pod("p").gpus(8).build()
    patch = steer_patch(before, "gpu-7", (4,), 1, GANG)
    raced = copy.deepcopy(before)
    raced["spec"]["affinity"] = {"podAntiAffinity": {}}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_as_the_api_server(raced, patch)


def test_release_only_lifts_the_gate() -> None:
    before = pod("launcher").gates(GATE, "b").build()
    after = apply_as_the_api_server(before, release_patch(before))
    assert after["spec"]["schedulingGates"] == [{"name": "b"}]
    assert "affinity" not in after["spec"]
    assert after["metadata"]["annotations"] == {}


def test_a_pod_without_the_gate_is_not_steered() -> None:
    with pytest.raises(NotGatedError):
        steer_patch(pod("p").gates("other").build(), "gpu-7", (0,), 1, GANG)


def test_annotation_keys_are_escaped_as_json_pointers() -> None:
    before = pod("p").gpus(1).annotate("x", "y").build()
    paths = [op["path"] for op in steer_patch(before, "n", (0,), 1, GANG) if op["path"].startswith("/metadata")]
    assert "/metadata/annotations/gputopo.io~1gpus" in paths
