"""PCIe distance from sysfs paths, and NVML bus ids in sysfs form."""

from __future__ import annotations

import pytest

from gputopo.api.nodetopology import LinkKind
from gputopo_probe.nvml import normalise_bus_id
from gputopo_probe.pcie import PciPath, pcie_distance

ROOT = "/sys/devices/pci0000:00"
SWITCH = f"{ROOT}/0000:00:01.0/0000:01:00.0"
GPU = f"{ROOT}/0000:00:01.0/0000:01:00.0"
SAME_NUMA = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0"
OTHER_SOCKET = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"


@pytest.mark.parametrize(
    ("a", "b", "numa", "expected"),
    [
        (f"{SWITCH}/0000:02:08.0/0000:03:00.0", f"{SWITCH}/0000:02:10.0/0000:04:00.0", (0, 0), LinkKind.PIX),
        (
            f"{SWITCH}/0000:02:08.0/0000:03:00.0/0000:05:00.0/0000:06:00.0",
            f"{SWITCH}/0000:02:10.0/0000:04:00.0/0000:07:00.0/0000:08:00.0",
            (0, 0),
            LinkKind.PXB,
        ),
        (f"{ROOT}/0000:00:01.0/0000:01:00.0", f"{ROOT}/0000:00:02.0/0000:02:00.0", (0, 0), LinkKind.PHB),
        (
            f"{ROOT}/0000:00:01.0/0000:01:00.0",
            "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0",
            (0, 0),
            LinkKind.NODE,
        ),
        (
            f"{ROOT}/0000:00:01.0/0000:01:00.0",
            "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0",
            (0, 1),
            LinkKind.SYS,
        ),
        (
            f"{ROOT}/0000:00:01.0/0000:01:00.0",
            "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0",
            (0, None),
            LinkKind.NODE,
        ),
    ],
    ids=["same-switch", "switch-tree", "host-bridge", "other-root-same-numa", "other-socket", "unknown-numa"],
)
def test_pcie_distance(a: str, b: str, numa: tuple[int | None, int | None], expected: LinkKind) -> None:
    pa, pb = PciPath.parse(a, numa[0]), PciPath.parse(b, numa[1])
    assert pcie_distance(pa, pb) is expected
    assert pcie_distance(pb, pa) is expected


def test_path_under_a_temporary_root() -> None:
    path = PciPath.parse("/tmp/x/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0")
    assert (path.root, path.bridges, path.device) == ("pci0000:17", ("0000:17:01.0",), "0000:18:00.0")


@pytest.mark.parametrize(
    "text", ["/sys/devices/virtual/net/lo", "/sys/devices/pci0000:00"], ids=["virtual", "root-only"]
)
def test_not_a_pci_device(text: str) -> None:
    with pytest.raises(ValueError):
        PciPath.parse(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"00000000:07:00.0", "0000:07:00.0"),
        ("00000000:B3:00.0", "0000:b3:00.0"),
        (b"00000001:0A:1F.3\x00\x00", "0001:0a:1f.3"),
        (b"", ""),
        (b"\xff\xfe", ""),
        ("garbage", ""),
    ],
    ids=["bytes", "upper-case", "domain-and-padding", "empty", "unprintable", "garbage"],
)
def test_normalise_bus_id(raw: bytes | str, expected: str) -> None:
    assert normalise_bus_id(raw) == expected
