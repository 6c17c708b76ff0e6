"""The fault store: the library the CLI calls; one small JSON file per node, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputopo_probe.errors import FaultStoreError
from gputopo_probe.fake.faults import FaultStore, GpuFault


def test_faults_accumulate_and_clear(tmp_path: Path) -> None:
    store = FaultStore(tmp_path)
    store.link("n1", 3, 1, "down")
    store.link("n1", 0, 2, "degraded")
    store.nic("n1", "mlx5_0", "down")
    store.gpu("n1", 4, xid=79)
    store.gpu("n1", 5, hot=True)
    faults = FaultStore(tmp_path).read("n1")
    assert faults.links == {(1, 3): "down", (0, 2): "degraded"}
    assert faults.nics == {"mlx5_0": "down"}
    assert faults.gpus == {4: GpuFault(79, False, 1), 5: GpuFault(None, True, 0)}

    store.link("n1", 1, 3, "up")
    store.link("n1", 2, 0, "up")
    store.nic("n1", "mlx5_0", "up")
    store.gpu("n1", 4, clear=True)
    store.gpu("n1", 5, hot=False)
    assert FaultStore(tmp_path).read("n1").empty


def test_fabric_fault_is_node_wide_and_heals(tmp_path: Path) -> None:
    store = FaultStore(tmp_path)
    store.link("n1", 0, 1, "down")
    store.fabric("n1", "degraded")
    assert FaultStore(tmp_path).read("n1").fabric == "degraded"
    assert FaultStore(tmp_path).read("n1").links == {(0, 1): "down"}, "other faults stay"
    store.fabric("n1", "down")
    assert FaultStore(tmp_path).read("n1").fabric == "down"
    store.fabric("n1", "up")
    store.link("n1", 0, 1, "up")
    assert FaultStore(tmp_path).read("n1").empty
    with pytest.raises(FaultStoreError, match="fabric state"):
        store.fabric("n1", "sideways")  # type: ignore[arg-type]


def test_each_xid_written_is_a_new_event(tmp_path: Path) -> None:
    store = FaultStore(tmp_path)
    store.gpu("n1", 0, xid=79)
    store.gpu("n1", 0, xid=79)
    assert store.read("n1").gpus[0].seq == 2


def test_one_file_per_node_and_no_temporaries_left(tmp_path: Path) -> None:
    store = FaultStore(tmp_path)
    store.link("a", 0, 1, "down")
    store.nic("b", "mlx5_1", "down")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a.json", "b.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert json.loads((tmp_path / "a.json").read_text())["links"] == {"0-1": "down"}


def test_no_file_means_no_faults(tmp_path: Path) -> None:
    assert FaultStore(tmp_path / "missing").read("n1").empty


@pytest.mark.parametrize(
    ("call", "args"),
    [("link", ("n1", 0, 1, "sideways")), ("nic", ("n1", "mlx5_0", "degraded"))],
    ids=["bad-link-state", "bad-nic-state"],
)
def test_bad_states_are_refused(tmp_path: Path, call: str, args: tuple[object, ...]) -> None:
    with pytest.raises(FaultStoreError):
        getattr(FaultStore(tmp_path), call)(*args)


def test_a_corrupt_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "n1.json").write_text("{not json")
    with pytest.raises(FaultStoreError):
        FaultStore(tmp_path).read("n1")


@pytest.mark.parametrize(
    ("node_type", "a", "b"),
    [("dgx-a100", 0, 1), ("dgx1-v100", 0, 3)],
    ids=["nvswitch-pair", "direct-nvlink"],
)
def test_fault_present_at_start_is_reported_down(tmp_path: Path, node_type: str, a: int, b: int) -> None:
    """A probe (re)started while a link is already down reports it Down, not as a link the node lacks."""
    from gputopo.api.nodetopology import LinkState
    from gputopo.topology.catalog import load_node_type
    from gputopo_probe.farm import FarmNode, build_member

    store = FaultStore(tmp_path)
    store.link("n0", a, b, "down")
    member = build_member(
        FarmNode("n0", node_type),
        load_node_type(node_type),
        kube=None,
        faults=store,
        allocator=None,
        down_after=2,
        up_after=2,
        heartbeat_s=60,
    )
    try:
        for _ in range(3):
            poll = member.probe.poll()
        assert poll.topology.link(a, b).state is LinkState.DOWN
    finally:
        member.probe.close()
