"""Faults injected into the fake NVML and sysfs are seen within N+1 polls, and so is their clearing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import ProbeFactory
from probe_builders import hgx, pairs_board, pcie_only

from gputopo.api.nodetopology import GpuHealthState, LinkState, NicState
from gputopo.topology.model import Topology
from gputopo_probe.fake.faults import FaultStore
from gputopo_probe.probe import Probe

Inject = Callable[[FaultStore], None]
Check = Callable[[Topology], bool]

NODE = "node-1"
CASES: list[tuple[str, Callable[[], Topology], Inject, Check]] = [
    (
        "nvswitch-pair-down",
        hgx,
        lambda s: s.link(NODE, 0, 1, "down"),
        lambda t: t.link(0, 1).state is LinkState.DOWN and t.link(0, 2).state is LinkState.UP,
    ),
    (
        "nvswitch-degraded",
        hgx,
        lambda s: s.link(NODE, 2, 3, "degraded"),
        lambda t: t.link(2, 3).state is LinkState.DEGRADED,
    ),
    (
        "nvlink-bridge-down",
        pairs_board,
        lambda s: s.link(NODE, 0, 1, "down"),
        lambda t: t.link(0, 1).state is LinkState.DOWN and t.link(2, 3).state is LinkState.UP,
    ),
    (
        "nvlink-bridge-degraded",
        pairs_board,
        lambda s: s.link(NODE, 2, 3, "degraded"),
        lambda t: t.link(2, 3).state is LinkState.DEGRADED,
    ),
    (
        "single-nvlink-degraded-by-errors",
        lambda: pairs_board(nvlinks=1),
        lambda s: s.link(NODE, 0, 1, "degraded"),
        lambda t: t.link(0, 1).state is LinkState.DEGRADED,
    ),
    (
        "pcie-pair-down",
        pcie_only,
        lambda s: s.link(NODE, 1, 2, "down"),
        lambda t: t.link(1, 2).state is LinkState.DOWN,
    ),
    (
        "nic-down",
        hgx,
        lambda s: s.nic(NODE, "mlx5_3", "down"),
        lambda t: next(n for n in t.nics if n.name == "mlx5_3").state is NicState.DOWN,
    ),
    (
        "gpu-hot",
        hgx,
        lambda s: s.gpu(NODE, 5, hot=True),
        lambda t: t.gpus[5].health is GpuHealthState.DEGRADED and "Thermal" in t.gpus[5].health_reason,
    ),
    (
        "gpu-xid-79",
        hgx,
        lambda s: s.gpu(NODE, 2, xid=79),
        lambda t: t.gpus[2].health is GpuHealthState.UNHEALTHY and t.gpus[2].health_reason == "XID 79",
    ),
]


def _healthy(t: Topology) -> bool:
    return (
        all(link.state is LinkState.UP for link in t.links.values())
        and all(n.state is NicState.UP for n in t.nics)
        and all(g.health is GpuHealthState.HEALTHY for g in t.gpus)
    )


def _polls_until(probe: Probe, check: Check, limit: int) -> int | None:
    for n in range(1, limit + 1):
        if check(probe.poll().topology):
            return n
    return None


@pytest.mark.parametrize(("name", "build", "inject", "check"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize(("down_after", "up_after"), [(2, 2), (3, 1)], ids=["n2-m2", "n3-m1"])
@pytest.mark.parametrize("farm", [False, True], ids=["node", "farm"])
def test_fault_seen_and_cleared_within_n_plus_one_polls(
    fake_probe: ProbeFactory,
    farm: bool,
    name: str,
    build: Callable[[], Topology],
    inject: Inject,
    check: Check,
    down_after: int,
    up_after: int,
) -> None:
    probe, _, store = fake_probe(build(), down_after=down_after, up_after=up_after, farm=farm)
    assert _healthy(probe.poll().topology)
    assert _healthy(probe.poll().topology)

    inject(store)
    seen = _polls_until(probe, check, down_after + 1)
    assert seen is not None, f"{name} not seen within {down_after + 1} polls"
    if not name.startswith("gpu-xid"):  # an XID is an event, published at once; readings wait for N
        assert seen >= down_after

    store.clear(NODE)
    cleared = _polls_until(probe, _healthy, up_after + 1)
    assert cleared is not None, f"{name} not cleared within {up_after + 1} polls"


def test_one_bad_reading_is_no_failure(fake_probe: ProbeFactory) -> None:
    probe, _, store = fake_probe(hgx(), down_after=2)
    probe.poll()
    store.nic(NODE, "mlx5_0", "down")
    assert _healthy(probe.poll().topology)
    store.nic(NODE, "mlx5_0", "up")
    assert all(_healthy(probe.poll().topology) for _ in range(3))


def test_transitions_name_what_changed(fake_probe: ProbeFactory) -> None:
    probe, _, store = fake_probe(hgx(), down_after=1, up_after=1)
    probe.poll()
    store.link(NODE, 0, 1, "down")
    transitions = probe.poll().transitions
    assert [(t.subject, t.old, t.new, t.worse) for t in transitions] == [("link 0-1", "Up", "Down", True)]


def test_non_fatal_xid_is_reported_but_keeps_the_gpu(fake_probe: ProbeFactory) -> None:
    probe, _, store = fake_probe(hgx(), down_after=1)
    probe.poll()
    store.gpu(NODE, 4, xid=13)  # GR_EXCEPTION: an application error
    poll = probe.poll()
    assert poll.topology.gpus[4].health is GpuHealthState.HEALTHY
    assert poll.details[4].xid == 13


def test_lost_gpu_is_unhealthy_and_its_links_down(fake_probe: ProbeFactory) -> None:
    probe, node, _ = fake_probe(hgx(), down_after=1)
    probe.poll()
    node.nvml.lost.add(6)
    t = probe.poll().topology
    assert t.gpus[6].health is GpuHealthState.UNHEALTHY
    assert t.link(6, 7).state is LinkState.DOWN and t.link(0, 1).state is LinkState.UP


def test_xid_thread_delivers_events(fake_probe: ProbeFactory) -> None:
    probe, node, store = fake_probe(hgx())
    probe.monitor.xids.start(timeout_ms=50)
    try:
        store.gpu(NODE, 1, xid=48)
        node.sync_faults()
        deadline = 200
        while deadline and not probe.monitor.xids._pending:
            probe.monitor.xids._stop.wait(0.01)
            deadline -= 1
        assert probe.poll().topology.gpus[1].health is GpuHealthState.UNHEALTHY
    finally:
        probe.monitor.xids.stop()


def test_farm_reuses_quiet_polls_only(fake_probe: ProbeFactory) -> None:
    probe, _, store = fake_probe(hgx(), farm=True)
    first = probe.poll()
    again = probe.poll()
    assert again.topology is first.topology, "unchanged fake hardware: the last readings are reused"
    store.link(NODE, 0, 1, "down")
    assert probe.poll().topology is not first.topology
