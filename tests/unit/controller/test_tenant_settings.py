"""The operator's settings for a shared cluster, read from the environment as the chart's ConfigMap fills it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gputopo.controller.settings import OperatorSettings


def test_the_preemption_settings_carry_the_classes_that_may_preempt_and_the_longest_minimum_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUTOPO_PREEMPTION_CLASSES", '{"prod": ["team-a", "team-b"], "urgent": ["*"]}')
    monkeypatch.setenv("GPUTOPO_PREEMPTION_MAX_MIN_RUNTIME_SECONDS", "900")
    found = OperatorSettings().preemption_settings
    assert found is not None
    assert found.preemptors == {"prod": frozenset({"team-a", "team-b"}), "urgent": frozenset({"*"})}
    assert found.max_min_runtime_seconds == 900


def test_preemption_off_has_no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTOPO_PREEMPTION", "false")
    assert OperatorSettings().preemption_settings is None


@pytest.mark.parametrize(
    "value",
    ['{"prod": []}', '{"": ["a"]}', '{"prod": [""]}', '["prod"]'],
    ids=["no-namespaces", "no-name", "empty-ns", "a-list"],
)
def test_a_bad_list_of_preempting_classes_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUTOPO_PREEMPTION_CLASSES", value)
    with pytest.raises((ValidationError, ValueError), match="preemption_classes"):
        OperatorSettings()


def test_the_queue_name_rule_is_kueues_setting_per_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTOPO_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME", "true")
    monkeypatch.setenv("GPUTOPO_KUEUE_MANAGED_JOBS_NAMESPACES", "team-a,team-b")
    rule = OperatorSettings().queue_names
    assert rule.manage_jobs_without_queue_name and rule.namespaces == frozenset({"team-a", "team-b"})
    assert rule.refusal("team-c") is None and rule.refusal("team-a") is not None
