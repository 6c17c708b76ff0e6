"""NIC roles as a pure decision over what sysfs and procfs said, case by named case; the route table's reading."""

from __future__ import annotations

import pytest

from gputopo.api.nodetopology import LinkKind, NicRole
from gputopo_probe.discovery.sysfs import default_route_devices
from gputopo_probe.errors import ProbeError
from gputopo_probe.roles import NicFacts, NicRoleRules, nic_roles

C, S, F = NicRole.COMPUTE, NicRole.STORAGE, NicRole.FRONT_END
K = LinkKind


def ib(name: str, numa: int | None = 0, *, route: bool | None = False, near: K | None = K.NODE) -> NicFacts:
    return NicFacts(name, "InfiniBand", numa, route, near)


def eth(
    name: str, numa: int | None = 0, *, route: bool | None = False, near: K | None = K.NODE, bluefield: bool = False
) -> NicFacts:
    return NicFacts(name, "Ethernet", numa, route, near, bluefield)


CASES = [
    # (id, NICs, GPU NUMA nodes, rules, the NIC looked at, its role)
    ("grace-ib-rail-numa-local", [ib("r0"), ib("r1", 1)], [0, 1], None, "r1", C),
    ("grace-ib-on-a-numa-node-without-gpu", [ib("r0"), ib("st", 2, near=K.SYS)], [0, 1], None, "st", S),
    ("ethernet-on-a-numa-node-without-gpu", [ib("r0"), eth("st", 3, near=K.SYS)], [0], None, "st", S),
    ("default-route-port", [ib("r0"), eth("fe", route=True)], [0], None, "fe", F),
    ("default-route-even-on-infiniband", [ib("r0"), ib("ipoib", route=True)], [0], None, "ipoib", F),
    ("default-route-beats-pix", [ib("r0", near=K.PIX, route=True)], [0], None, "r0", F),
    ("bluefield-ethernet-port-on-an-ib-node", [ib("r0"), eth("bf", bluefield=True)], [0], None, "bf", F),
    ("plain-ethernet-port-on-an-ib-node", [ib("r0"), eth("st")], [0], None, "st", S),
    ("roce-rail-on-an-ethernet-only-node", [eth("r0"), eth("r1", 1)], [0, 1], None, "r1", C),
    ("bluefield-roce-rail-on-an-ethernet-only-node", [eth("r0", bluefield=True)], [0], None, "r0", C),
    ("roce-beside-a-gpu-on-an-ib-node", [ib("r0"), eth("r1", near=K.PXB)], [0], None, "r1", C),
    ("pix-beats-a-remote-numa-node", [ib("r0"), ib("r1", 5, near=K.PIX)], [0], None, "r1", C),
    ("route-table-unreadable", [ib("r0"), eth("fe", route=None)], [0], None, "fe", S),
    ("numa-unknown-ib", [ib("r0", None, near=None)], [0], None, "r0", C),
    ("link-layer-unknown", [ib("r0"), NicFacts("x", "", 0, False, K.NODE)], [0], None, "x", None),
    # A GB200 whose GPUs report their memory's NUMA nodes (2, 10, …): no NIC is near one, so NUMA decides nothing.
    ("gpu-memory-numa-nodes-ignored", [ib("r0", 0, near=K.SYS), ib("r1", 1, near=K.SYS)], [2, 10], None, "r1", C),
    ("no-gpus", [ib("r0", near=None)], [], None, "r0", C),
    ("setting-names-storage", [ib("r0"), ib("r1")], [0], NicRoleRules.parse(storage="r1"), "r1", S),
    ("setting-beats-default-route", [eth("fe", route=True)], [0], NicRoleRules.parse(compute="fe"), "fe", C),
    ("setting-names-front-end", [ib("r0"), ib("m")], [0], NicRoleRules.parse(front_end="m|x"), "m", F),
    ("setting-matches-whole-names", [ib("r0"), ib("r10")], [0], NicRoleRules.parse(storage="r1"), "r10", C),
    ("first-setting-wins", [ib("r0")], [0], NicRoleRules.parse(compute="r0", storage="r.*"), "r0", C),
]


@pytest.mark.parametrize(
    ("nics", "gpu_numa", "rules", "name", "role"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_role(
    nics: list[NicFacts], gpu_numa: list[int], rules: NicRoleRules | None, name: str, role: NicRole | None
) -> None:
    assert nic_roles(nics, gpu_numa, rules)[name] is role


def test_a_bad_pattern_names_its_setting() -> None:
    with pytest.raises(ProbeError, match="storageNics"):
        NicRoleRules.parse(storage="mlx5_[")


ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
bond0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
bond0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ib0\t0000100A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth9\t00000000\t0100A8C0\t0002\t0\t0\t0\t00000000\t0\t0\t0
"""
IPV6 = (
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001"
    " 00000400 00000001 00000000 00000003 enp1s0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000"
    " ffffffff 00000001 00000000 00200200 lo\n"
    "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000"
    " 00000100 00000001 00000000 00000001 ib0\n"
)


@pytest.mark.parametrize(
    ("route", "ipv6", "devices"),
    [
        (ROUTE, "", {"bond0"}),
        (ROUTE, IPV6, {"bond0", "enp1s0"}),
        (ROUTE.splitlines()[0], "", set()),
        ("", "", set()),
    ],
    ids=["ipv4-up-only", "ipv6-default-not-lo", "no-default", "empty"],
)
def test_default_route_devices(route: str, ipv6: str, devices: set[str]) -> None:
    assert default_route_devices(route, ipv6) == devices
