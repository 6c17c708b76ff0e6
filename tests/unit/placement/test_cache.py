"""The placement cache handed from one snapshot to the next, as the operator's passes hand it on."""

from __future__ import annotations

import gc

from gputopo.api.nodetopology import GpuHealthState
from gputopo.api.trainingjob import IntraNode
from gputopo.placement.cache import PlacementCache
from gputopo.placement.groups import node_offer
from gputopo.placement.types import NodeInfo, Snapshot
from gputopo.topology.catalog import load_node_type


def test_a_node_unchanged_since_the_last_snapshot_is_not_worked_out_again() -> None:
    topology = load_node_type("hgx-h100")
    cache = PlacementCache()
    first = Snapshot([NodeInfo("n1", topology)], cache=cache)
    offer = node_offer(first, first.nodes[0], 2, IntraNode.ANY)
    again = Snapshot([NodeInfo("n1", topology)], cache=cache)
    assert node_offer(again, again.nodes[0], 2, IntraNode.ANY) is offer
    busier = Snapshot([NodeInfo("n1", topology, used_gpus=frozenset({0, 1}))], cache=cache)
    other = node_offer(busier, busier.nodes[0], 2, IntraNode.ANY)
    assert other is not offer and other.capacity == offer.capacity - 1


def test_a_new_model_of_the_node_is_worked_out_anew() -> None:
    cache = PlacementCache()
    before = Snapshot([NodeInfo("n1", load_node_type("hgx-h100"))], cache=cache)
    offer = node_offer(before, before.nodes[0], 8, IntraNode.ANY)
    hurt = load_node_type("hgx-h100").with_gpu_health(3, GpuHealthState.UNHEALTHY, "XID 79")
    after = Snapshot([NodeInfo("n1", hurt)], cache=cache)
    assert offer.capacity == 1 and node_offer(after, after.nodes[0], 8, IntraNode.ANY).capacity == 0


def test_the_cache_keeps_the_topologies_its_keys_name() -> None:
    """Keys hold ids: a topology freed while the cache lives could give its id to another."""
    cache = PlacementCache()
    Snapshot([NodeInfo("n1", load_node_type("hgx-h100"))], cache=cache)
    gc.collect()
    assert cache.size() >= 1
    kept = list(cache._kept.values())
    assert len(kept) == 1 and kept[0].gpu_count == 8


def test_a_model_a_derived_snapshot_brings_in_is_kept_too() -> None:
    cache = PlacementCache()
    first = Snapshot([NodeInfo("n1", load_node_type("hgx-h100"))], cache=cache)
    hurt = load_node_type("hgx-h100").with_gpu_health(3, GpuHealthState.UNHEALTHY, "XID 79")
    first.with_node(NodeInfo("n1", hurt))
    assert any(t is hurt for t in cache._kept.values())
