"""Fluent builders of topologies for the topology tests: ``node(4).nvlink(0, 1, 12).pcie(0, 2, "SYS")``."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology import Gpu, Link, Nic, SystemFacts, Topology


@dataclass
class NodeBuilder:
    n: int
    model: str = ""
    default: LinkKind = LinkKind.SYS
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    nics: list[Nic] = field(default_factory=list)
    nvswitch_links: int = 0

    def gpu_model(self, model: str) -> NodeBuilder:
        self.model = model
        return self

    def all(self, kind: str) -> NodeBuilder:
        self.default = LinkKind(kind)
        return self

    def nvlink(self, a: int, b: int, links: int, state: str = "Up") -> NodeBuilder:
        self.links[(min(a, b), max(a, b))] = Link(a, b, LinkKind.NVLINK, links, LinkState(state))
        return self

    def pcie(self, a: int, b: int, kind: str) -> NodeBuilder:
        self.links[(min(a, b), max(a, b))] = Link(a, b, LinkKind(kind))
        return self

    def nvswitch(self, links: int) -> NodeBuilder:
        self.nvswitch_links = links
        return self

    def nic(self, name: str, affinity: list[str], rate: float = 400.0, state: str = "Up") -> NodeBuilder:
        from gputopo.api.nodetopology import NicState

        self.nics.append(
            Nic(name, rate_gbps=rate, state=NicState(state), affinity=tuple(LinkKind(k) for k in affinity))
        )
        return self

    def build(self) -> Topology:
        links = []
        for a in range(self.n):
            for b in range(a + 1, self.n):
                if (a, b) in self.links:
                    links.append(self.links[(a, b)])
                elif self.nvswitch_links:
                    links.append(Link(a, b, LinkKind.NVSWITCH, self.nvswitch_links))
                else:
                    links.append(Link(a, b, self.default))
        gpus = [Gpu(i, model=self.model) for i in range(self.n)]
        return Topology.build(gpus, links, self.nics, SystemFacts(nvswitch=bool(self.nvswitch_links)))


def node(n: int) -> NodeBuilder:
    return NodeBuilder(n)


def fixture_names() -> list[str]:
    """The ``nvidia-smi topo -m`` fixture files shipped with the package, sorted."""
    folder = resources.files("gputopo.topology").joinpath("fixtures", "nvidia-smi")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".txt"))


def refused_fixture_names() -> list[str]:
    """The shipped fixtures the importer refuses (posted matrices cut short), sorted."""
    from gputopo.topology import NvidiaSmiParseError, parse_nvidia_smi_all
    from gputopo.topology.catalog import fixture_text

    refused = []
    for name in fixture_names():
        try:
            parse_nvidia_smi_all(fixture_text(name))
        except NvidiaSmiParseError:
            refused.append(name)
    return refused
