"""How the client tells a refusal that is an outcome (a JSON patch that no longer applies, an eviction a budget
blocks) from one that is an error, from the Status objects kube-apiserver answers with."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gputopo.kube.client import _budget_refused, _error, _not_applicable


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> str:
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    return json.dumps({**body, "details": details or {}})


# kube-apiserver v1.36.3's answer to a JSON patch whose test op fails, or whose remove names a missing path
NOT_APPLIED = status(422, "Invalid", "the server rejected our request due to an error in our request")
FORBIDDEN = status(
    422,
    "Invalid",
    'Pod "p1" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`',
    {"name": "p1", "kind": "Pod", "causes": [{"reason": "FieldValueForbidden", "field": "spec"}]},
)


@pytest.mark.parametrize(
    ("code", "text", "not_applicable"),
    [
        (422, NOT_APPLIED, True),
        (422, FORBIDDEN, False),
        (500, status(500, "InternalError", "the server rejected our request due to an error in our request"), False),
        (400, status(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"), False),
    ],
    ids=["does not apply", "a change validation forbids", "not a 422", "a malformed patch"],
)
def test_a_patch_that_does_not_apply_is_told_from_other_refusals(code: int, text: str, not_applicable: bool) -> None:
    assert _not_applicable(_error(code, text, "patch Pod ml/p")) is not_applicable


@pytest.mark.parametrize(
    ("code", "message", "blocked"),
    [
        (429, "Cannot evict pod as it would violate the pod's disruption budget.", True),
        (429, "Too many requests, please try again later.", False),
        (
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            False,
        ),
    ],
    ids=["a budget", "throttled", "two budgets"],
)
def test_only_a_budget_blocks_an_eviction(code: int, message: str, blocked: bool) -> None:
    error = _error(code, status(code, "TooManyRequests" if code == 429 else "InternalError", message), "evict")
    assert _budget_refused(error) is blocked
