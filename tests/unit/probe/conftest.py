"""A fake probe factory for the probe's unit tests."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gputopo.topology.model import Topology
from gputopo_probe.fake.faults import FaultStore
from gputopo_probe.fake.node import FakeNode
from gputopo_probe.nvml import Nvml
from gputopo_probe.probe import Probe

sys.path.insert(0, str(Path(__file__).parent))  # probe_builders

ProbeFactory = Callable[..., tuple[Probe, FakeNode, FaultStore]]


@pytest.fixture
def fake_probe(tmp_path: Path) -> Iterator[ProbeFactory]:
    """``fake_probe(topology, down_after=2, up_after=2)`` -> (probe, fake node, fault store)."""
    made: list[tuple[Probe, FakeNode]] = []

    def make(topology: Topology, *, farm: bool = False, **kwargs: Any) -> tuple[Probe, FakeNode, FaultStore]:
        store = FaultStore(tmp_path / "faults")
        node = FakeNode("node-1", topology, faults=store, sysfs_root=tmp_path / f"sys{len(made)}")
        quiet = node.quiet if farm else None  # a farm reuses polls of hardware that reads as before
        probe = Probe(
            Nvml(node.nvml),
            node.reader(),
            xid_thread=False,
            before_poll=node.sync_faults,
            quiet=quiet,
            **kwargs,
        )
        made.append((probe, node))
        return probe, node, store

    yield make
    for probe, node in made:
        probe.close()
        node.close()
