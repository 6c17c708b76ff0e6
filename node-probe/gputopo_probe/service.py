"""Wiring of a running probe: the API client, the pod source, the publisher, the HTTP server, the loop."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING

from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.nvml import Nvml
from gputopo_probe.probe import PodSource, Probe
from gputopo_probe.publish.kube import Kube, load_api_client
from gputopo_probe.publish.publisher import Publisher
from gputopo_probe.publish.server import Metrics, ProbeServer, parse_listen
from gputopo_probe.runner import Member, Runner

if TYPE_CHECKING:
    from gputopo_probe.fake.node import FakeNode
    from gputopo_probe.fake.podwatch import PodWatch

__all__ = ["serve", "serve_single"]

log = logging.getLogger(__name__)


def serve(runner: Runner, listen: str) -> int:
    """Run the loop until interrupted, with the HTTP endpoints when ``listen`` asks for them."""
    address = parse_listen(listen)
    server = ProbeServer(address, runner.metrics, runner.alive, runner.ready).start() if address else None
    try:
        runner.run()
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
        if server:
            server.stop()
        runner.close()
    return 0


def serve_single(args: argparse.Namespace, node: str, nvml: Nvml, sysfs: Sysfs, fake: FakeNode | None) -> int:
    kube = Kube(load_api_client(args.kubeconfig))
    pods: PodSource | None = None
    watch: PodWatch | None = None
    if fake is not None:
        from gputopo_probe.fake.allocation import FakeAllocator
        from gputopo_probe.fake.podwatch import PodWatch

        allocator = FakeAllocator(fake.topology, args.fake_allocation)
        watch = PodWatch(kube, {node: allocator}, node=node).start()
        pods = allocator.pods
    probe = Probe(
        nvml,
        sysfs,
        down_after=args.down_after,
        up_after=args.up_after,
        before_poll=fake.sync_faults if fake else None,
        pods=pods,
    )
    if fake is None and os.path.exists(args.pod_resources_socket):
        from gputopo_probe.podresources.client import PodResourcesClient  # grpc only where a kubelet is

        pods_client = PodResourcesClient(args.pod_resources_socket)
        probe.pods = pods_client.source([g.uuid for g in probe.inventory.topology.gpus])
    elif fake is None:
        log.info("no PodResources socket at %s: not reporting pod GPUs", args.pod_resources_socket)
    publisher = Publisher(kube, node, heartbeat_s=args.heartbeat)
    if args.once:
        ok = publisher.publish(probe.poll())
        probe.close()
        return 0 if ok else 1
    runner = Runner(args.interval or 5.0, Metrics(), publish_workers=1, confirm_s=args.confirm_interval)
    runner.add(Member(node, probe, publisher))
    try:
        return serve(runner, args.listen)
    finally:
        if watch:
            watch.stop()
