"""`gputopo plan` and `gputopo simulate` with `--gpu-allocation`: the GPUs the operator will plan in each mode."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gputopo.cli.main import app
from gputopo.topology.catalog import load_node_type
from gputopo.topology.device_plugin import kubelet_choice

runner = CliRunner()
USED = [0, 4]


def _files(tmp_path: Path) -> list[str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [{"name": "n0", "type": "dgx1-v100", "usedGpus": USED}]}))
    container = {"name": "w", "image": "pytorch"}
    spec = {"workers": 1, "gpusPerWorker": 4, "template": {"spec": {"containers": [container]}}}
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"metadata": {"name": "tj"}, "spec": spec}))
    return ["plan", "--job", str(job), "--cluster", str(cluster), "--json"]


def _gpus(tmp_path: Path, *extra: str) -> tuple[list[int], float]:
    result = runner.invoke(app, [*_files(tmp_path), *extra])
    assert result.exit_code == 0, result.output
    placement = json.loads(result.stdout)["placement"]
    return placement["workers"][0]["gpus"], placement["estimatedBusBandwidthGBps"]


def test_device_plugin_mode_plans_the_plugins_own_pick(tmp_path: Path) -> None:
    """On a DGX-1 with GPUs 0 and 4 taken, gputopo picks an NVLink-rich quad; the plugin picks another."""
    planned, planned_busbw = _gpus(tmp_path)
    assert _gpus(tmp_path, "--gpu-allocation", "dra") == (planned, planned_busbw)
    picked, picked_busbw = _gpus(tmp_path, "--gpu-allocation", "devicePlugin")
    free = [g for g in range(8) if g not in USED]
    assert tuple(picked) == kubelet_choice(load_node_type("dgx1-v100"), free, 4)
    assert picked != planned and picked_busbw < planned_busbw  # what the kubelet will give, and what it costs


def test_an_unknown_allocation_mode_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_files(tmp_path), "--gpu-allocation", "exact"])
    assert result.exit_code == 2 and "--gpu-allocation" in result.output


def test_simulate_plans_with_the_device_plugins_pick_in_that_mode(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [{"name": "n0", "type": "dgx1-v100", "usedGpus": USED}]}))
    trace = tmp_path / "trace.yaml"
    job = {"name": "a", "arrival": 0, "duration": 100, "workers": 1, "gpusPerWorker": 4}
    trace.write_text(yaml.safe_dump({"jobs": [job]}))
    base = ["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policy", "gputopo", "--json"]

    def busbw(*extra: str) -> float:
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 0, result.output
        return float(json.loads(result.stdout)["policies"]["gputopo"]["mean_busbw_GBps"])

    _, planned = _gpus(tmp_path)
    _, picked = _gpus(tmp_path, "--gpu-allocation", "devicePlugin")
    assert busbw() == busbw("--gpu-allocation", "dra") == planned
    assert busbw("--gpu-allocation", "devicePlugin") == picked < planned
