"""`gputopo simulate --preemption`: high-priority figures per preemption policy (the urgent job waits its
victim's grace period), and bad traces named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gputopo.cli.main import app

runner = CliRunner()

CLUSTER = {"nodes": [{"name": "n0", "type": "hgx-h100"}, {"name": "n1", "type": "hgx-h100"}]}
TRACE: dict[str, Any] = {
    "priorityClasses": [{"name": "batch", "value": 0}, {"name": "urgent", "value": 1000}],
    "jobs": [
        {"name": "a", "arrival": 0, "duration": 10000, "gpusPerWorker": 8, "priorityClass": "batch",
         "checkpointIntervalSeconds": 600, "gracePeriodSeconds": 20},
        {"name": "b", "arrival": 0, "duration": 10000, "gpusPerWorker": 8, "priorityClass": "batch",
         "gracePeriodSeconds": 20},
        {"name": "c", "arrival": 1000, "duration": 100, "gpusPerWorker": 8, "priorityClass": "urgent"},
    ],
}  # fmt: skip


def _args(tmp_path: Path, trace: dict[str, Any] = TRACE) -> list[str]:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(trace))
    return ["simulate", "--cluster", str(tmp_path / "c.yaml"), "--trace", str(tmp_path / "t.yaml")]


def test_simulate_preemption_json(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_args(tmp_path), "--preemption", "gputopo,priority-only,none", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["preemption"]
    assert doc["highClass"] == "urgent"
    ours, none = doc["policies"]["gputopo"], doc["policies"]["none"]
    assert ours["high_wait_p99_s"] == 20.0 and ours["preemptions"] == 1
    assert ours["high_wait_behind_lower_p99_s"] == 20.0  # its victim's grace: the cluster was not full of its own class
    assert ours["victim_gpu_hours_lost"] == pytest.approx(8 * 400 / 3600)  # "a", checkpointed at 600 s
    assert none["high_wait_p99_s"] == 9000.0 and none["preemptions"] == 0


def test_simulate_preemption_text_and_plot(tmp_path: Path) -> None:
    plot = tmp_path / "p.png"
    result = runner.invoke(app, [*_args(tmp_path), "--preemption", "gputopo", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("gputopo        urgent wait p50 20s p99 20s (behind lower priority 20s)")
    assert plot.stat().st_size > 0


@pytest.mark.parametrize(
    ("trace", "extra", "words"),
    [
        ({**TRACE, "jobs": [{**TRACE["jobs"][0], "priorityClass": "gold"}]}, [],
         "t.yaml: jobs[0].priorityClass: unknown priority class 'gold'; known: batch, urgent"),
        ({"jobs": TRACE["jobs"][:0]}, [], "t.yaml: priorityClasses: --preemption needs a trace with priority classes"),
        ({**TRACE, "jobs": [{**TRACE["jobs"][0], "gracePeriodSeconds": -1}]}, [],
         "t.yaml: jobs[0].gracePeriodSeconds: Input should be greater than or equal to 0"),
        (TRACE, ["--high-class", "vip"], "--high-class: 'vip' is not a priority class"),
    ],
    ids=["unknown-priority-class", "no-priority-classes", "negative-grace-period", "unknown-high-class"],
)  # fmt: skip
def test_simulate_preemption_bad_input(tmp_path: Path, trace: dict[str, Any], extra: list[str], words: str) -> None:
    result = runner.invoke(app, [*_args(tmp_path, trace), "--preemption", "gputopo", *extra])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


def test_unknown_preemption_policy(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_args(tmp_path), "--preemption", "kueue"])
    assert result.exit_code == 2 and "--preemption: unknown policies ['kueue']" in result.stderr
