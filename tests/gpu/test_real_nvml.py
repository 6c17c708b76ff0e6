"""Discovery on a real GPU server: ``gputopo-probe --once --print`` over real NVML and /sys.

Skipped, with the reason, where NVML cannot be initialised (no driver, no GPU)."""

from __future__ import annotations

import platform
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


def _x86() -> bool:
    return platform.machine() in ("x86_64", "AMD64")


def _raw_c2c(handle: object) -> dict[str, object]:
    """What NVML itself answers for C2C, each call's error kept as text: printed for whoever reads the run."""
    raw: dict[str, object] = {}
    try:
        raw["isC2cEnabled"] = int(pynvml.nvmlDeviceGetC2cModeInfoV(handle).isC2cEnabled)
    except (pynvml.NVMLError, AttributeError) as error:
        raw["isC2cEnabled"] = f"error: {error}"
    try:
        (count,) = pynvml.nvmlDeviceGetFieldValues(handle, [(pynvml.NVML_FI_DEV_C2C_LINK_COUNT, 0)])
        raw["linkCount"] = (int(count.nvmlReturn), int(count.value.uiVal))
    except pynvml.NVMLError as error:
        raw["linkCount"] = f"error: {error}"
    return raw


def test_c2c_and_fabric_read_without_error(device_count: int) -> None:
    """C2C and fabric info through the probe's readers: on a GPU without NVLink-C2C (an H200 or any x86 server's
    GPU) no C2C and no exception; fabric info is read or None, and published the same way."""
    from gputopo.topology import to_status
    from gputopo.topology.model import Gpu, Topology
    from gputopo_probe.discovery.c2c import read_c2c
    from gputopo_probe.discovery.fabric import read_fabric
    from gputopo_probe.nvml import Nvml

    pynvml.nvmlInit()
    try:
        nvml = Nvml(pynvml)
        for index in range(device_count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            c2c = read_c2c(nvml, handle)
            fabric = read_fabric(nvml, handle)
            print(f"GPU{index} {name}: raw C2C {_raw_c2c(handle)} -> {c2c}; fabric {fabric}")
            assert c2c.links >= 0 and c2c.gbps >= 0 and (c2c.gbps > 0) == (c2c.links > 0)
            if _x86():
                assert c2c.links == 0, "an x86 host's GPU has no NVLink-C2C to its CPU"
            gpu = Gpu(index, model=str(name), c2c_links=c2c.links, c2c_gbps=c2c.gbps, fabric=fabric)
            status = to_status(Topology.build([gpu], [])).gpus[0]
            assert (status.c2c is None) == (c2c.links == 0)
            assert (status.fabric is None) == (fabric is None)
            if fabric is not None:
                assert status.fabric is not None and status.fabric.state == fabric.state
                print(f"GPU{index} published fabric: {status.fabric.to_api()}")
    finally:
        pynvml.nvmlShutdown()


def _raw_numa(handle: object) -> dict[str, object]:
    """NVML's own NUMA answers, each call's error kept as text: printed for whoever reads the run."""
    raw: dict[str, object] = {}
    try:
        words = pynvml.nvmlDeviceGetCpuAffinityWithinScope(handle, 4, pynvml.NVML_AFFINITY_SCOPE_NODE)
        raw["cpuAffinityNode"] = [hex(int(w)) for w in words]
    except (pynvml.NVMLError, AttributeError) as error:
        raw["cpuAffinityNode"] = f"error: {error}"
    try:
        raw["numaNodeId"] = int(pynvml.nvmlDeviceGetNumaNodeId(handle))
    except (pynvml.NVMLError, AttributeError) as error:
        raw["numaNodeId"] = f"error: {error}"
    return raw


def test_cpu_affinity_places_each_gpu_on_its_cpus_node(device_count: int) -> None:
    """NVML's CPU affinity, placed by /sys's node CPU lists, names the node sysfs gives the GPU where both say;
    the node the probe publishes is one with CPUs (never a Grace GPU's own memory node)."""
    from gputopo_probe.discovery.gpus import read_gpu
    from gputopo_probe.discovery.numa import cpu_affinity_node
    from gputopo_probe.discovery.sysfs import Sysfs
    from gputopo_probe.nvml import Nvml, normalise_bus_id

    pynvml.nvmlInit()
    try:
        nvml, sysfs = Nvml(pynvml), Sysfs()
        node_cpus = sysfs.node_cpus()
        print({node: len(cpus) for node, cpus in node_cpus.items()})
        for index in range(device_count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus_id = normalise_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            in_sysfs = sysfs.numa_node(sysfs.pci_device(bus_id))
            by_affinity = cpu_affinity_node(nvml, handle, node_cpus)
            published = read_gpu(nvml, sysfs, index, handle, 0).numa_node
            print(
                f"GPU{index} {bus_id}: sysfs {in_sysfs}, affinity {by_affinity}, published {published}, "
                f"raw {_raw_numa(handle)}"
            )
            if in_sysfs is not None and by_affinity is not None and node_cpus.get(in_sysfs):
                assert by_affinity == in_sysfs
            if published is not None and node_cpus:
                assert node_cpus.get(published), "a GPU's published node is one with CPUs"
    finally:
        pynvml.nvmlShutdown()


def test_published_nics_have_roles(device_count: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever RDMA NICs the server has are published with a role decided from sysfs (none is fine)."""
    assert main(["--once", "--print", "--node-name", "real-gpu-node"]) == 0
    status = NodeTopology.model_validate(yaml.safe_load(capsys.readouterr().out)).status
    with capsys.disabled():
        print({n.name: (n.link_layer, n.rate_gbps, n.numa_node, n.role, n.default_route) for n in status.nics})
        print({g.index: g.c2c for g in status.gpus})
    if _x86():
        assert all(g.c2c is None for g in status.gpus)
