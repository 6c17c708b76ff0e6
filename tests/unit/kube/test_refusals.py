"""How the client tells a refusal that is an outcome (a JSON patch whose test failed, an eviction a budget blocks)
from one that is an error, from the Status objects kube-apiserver answers with."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gputopo.kube.client import _budget_refused, _error, _test_failed


def status(code: int, reason: str, message: str, causes: list[dict[str, Any]] | None = None) -> str:
    body: dict[str, Any] = {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    if causes is not None:
        body["details"] = {"causes": causes}
    return json.dumps(body)


def not_applied(said: str) -> str:
    """A JSON patch that does not apply (apiserver ``NewGenericServerResponse(422, ...)``)."""
    cause = {"type": "UnexpectedServerResponse", "message": said}
    return status(422, "Invalid", "the server rejected our request due to an error in our request", [cause])


@pytest.mark.parametrize(
    ("text", "failed"),
    [
        (not_applied("testing value /spec/schedulingGates/1 failed: test failed"), True),
        (not_applied("error in test for path: '/spec/schedulingGates/1': Unable to access invalid index: 1"), True),
        (not_applied("test operation does not apply: is missing path: /metadata/uid: missing value"), True),
        (not_applied("Unable to remove nonexistent key: nodeName: missing value"), False),
        (
            status(
                422,
                "Invalid",
                'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than ...',
                [{"type": "FieldValueForbidden", "message": "Forbidden: pod updates may not change", "field": "spec"}],
            ),
            False,
        ),
        (status(500, "InternalError", "testing value failed"), False),
    ],
    ids=[
        "a value differs",
        "an index no longer there",
        "a path missing",
        "another op does not apply",
        "a validation refusal",
        "not a 422",
    ],
)
def test_a_failed_test_op_is_told_from_other_refusals(text: str, failed: bool) -> None:
    error = _error(422 if '"code": 422' in text else 500, text, "patch Pod ml/p")
    assert _test_failed(error) is failed


def test_a_refusal_with_a_generic_message_says_what_went_wrong() -> None:
    error = _error(422, not_applied("testing value /x failed: test failed"), "patch Pod ml/p")
    assert error.reason == "Invalid"
    assert str(error).endswith("error in our request: testing value /x failed: test failed")


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
