"""Discovery on a real GPU server: ``gputopo-probe --once --print`` over real NVML and /sys.

Skipped, with the reason, where NVML cannot be initialised (no driver, no GPU)."""

from __future__ import annotations

from itertools import combinations

import pynvml
import pytest
import yaml

from gputopo.api.nodetopology import NodeTopology
from gputopo_probe.main import main

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device_count() -> int:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        pytest.skip(f"no usable NVML here: nvmlInit failed with {error}")
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def test_once_print_on_real_nvml(device_count: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--once", "--print", "--node-name", "real-gpu-node"]) == 0
    out = capsys.readouterr().out
    print(out)  # the discovered NodeTopology, for whoever runs this on new hardware
    topology = NodeTopology.model_validate(yaml.safe_load(out))
    status = topology.status
    assert status.probe.backend == "nvml"
    assert len(status.gpus) == device_count
    assert [g.index for g in status.gpus] == list(range(device_count))
    uuids = [g.uuid for g in status.gpus]
    assert all(u.startswith(("GPU-", "MIG-")) for u in uuids) and len(set(uuids)) == device_count
    assert all(g.pci_bus_id.count(":") == 2 and g.pci_bus_id == g.pci_bus_id.lower() for g in status.gpus)
    assert all(g.model for g in status.gpus) and all(g.memory_mi_b > 0 for g in status.gpus)
    pairs = {(x.a, x.b) for x in status.links}
    assert pairs == set(combinations(range(device_count), 2)), "one link for every GPU pair"
    assert status.system.driver_version


def test_every_gpu_has_the_dra_drivers_device_name(device_count: int) -> None:
    """NVIDIA's DRA driver names a GPU ``gpu-<minor>``; the probe maps PodResources' DRA devices back by it."""
    from gputopo_probe.discovery.gpus import dra_device_names
    from gputopo_probe.nvml import Nvml

    pynvml.nvmlInit()
    try:
        names = dra_device_names(Nvml(pynvml))
    finally:
        pynvml.nvmlShutdown()
    print(names)
    assert sorted(names.values()) == list(range(device_count))
    assert all(name.startswith("gpu-") and name[4:].isdigit() for name in names)
