"""The operator's kopf registrations, as kopf will act on them."""

from __future__ import annotations

import kopf

from gputopo.controller.handlers import register
from gputopo.controller.settings import OperatorSettings


def unused_runtime() -> None:
    raise AssertionError("registration alone builds no runtime")


def test_the_control_loop_leaves_its_config_map_deletable_without_the_operator() -> None:
    registry = kopf.OperatorRegistry()
    register(registry, OperatorSettings(), unused_runtime)  # type: ignore[arg-type]
    daemons = registry._spawning._handlers
    assert [h.id.split("/")[0] for h in daemons] == ["control_loop"]
    # helm uninstall deletes the operator's RBAC before the ConfigMap: a finalizer would never come off.
    assert daemons[0].requires_finalizer is False
