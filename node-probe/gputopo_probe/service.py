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
from gputopo_probe.roles import NicRoleRules
from gputopo_probe.runner import Member, Runner

if TYPE_CHECKING:
    from gputopo_probe.fake.deviceplugin import FakeDevicePlugin
    from gputopo_probe.fake.dra import FakeDraDriver
    from gputopo_probe.fake.draplugin import FakeDraPlugin
    from gputopo_probe.fake.node import FakeNode
    from gputopo_probe.fake.podwatch import PodWatch

__all__ = ["serve", "serve_single"]

log = logging.getLogger(__name__)

_SLICE_REASSERT_S = 10.0


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


def serve_single(
    args: argparse.Namespace,
    node: str,
    nvml: Nvml,
    sysfs: Sysfs,
    fake: FakeNode | None,
    *,
    nic_rules: NicRoleRules | None = None,
) -> int:
    kube = Kube(load_api_client(args.kubeconfig))
    pods: PodSource | None = None
    watch: PodWatch | None = None
    plugin: FakeDevicePlugin | FakeDraPlugin | None = None
    driver: FakeDraDriver | None = None
    # Pod GPUs come from the kubelet on real nodes, and on fake nodes whose GPUs a real kubelet hands out.
    from_kubelet = fake is None or args.fake_allocation in ("kubelet", "dra")
    if fake is not None and not from_kubelet:
        from gputopo_probe.fake.allocation import FakeAllocator
        from gputopo_probe.fake.podwatch import PodWatch

        allocator = FakeAllocator(fake.topology, args.fake_allocation, fake.xid_gpus)
        watch = PodWatch(kube, {node: allocator}, node=node).start()
        pods = allocator.pods
    probe = Probe(
        nvml,
        sysfs,
        down_after=args.down_after,
        up_after=args.up_after,
        before_poll=fake.sync_faults if fake else None,
        pods=pods,
        nic_rules=nic_rules,
    )
    discovered = probe.inventory.topology
    if fake is not None and args.fake_allocation == "dra":
        from gputopo_probe.fake.dra import FakeDraDriver
        from gputopo_probe.fake.draplugin import FakeDraPlugin

        # As NVIDIA's DRA driver: the node's GPUs in a ResourceSlice (written again if the kubelet wipes it),
        # and a kubelet plugin that prepares the claims kube-scheduler allocated from it.
        driver = FakeDraDriver(kube, reassert_s=_SLICE_REASSERT_S)
        plugin = FakeDraPlugin(
            node,
            discovered,
            kube,
            plugins_dir=args.kubelet_plugins_dir,
            registry_dir=args.kubelet_registry_dir,
            cdi_dir=args.cdi_dir,
        ).start()
    elif fake is not None and from_kubelet:
        from gputopo_probe.fake.deviceplugin import FakeDevicePlugin

        # Advertised under the UUIDs the fake NVML reports, as NVIDIA's plugin does with real NVML.
        plugin = FakeDevicePlugin(discovered, fake.xid_gpus, plugin_dir=args.device_plugin_dir)
        plugin.start()
    if from_kubelet and os.path.exists(args.pod_resources_socket):
        from gputopo_probe.discovery.gpus import dra_device_names
        from gputopo_probe.podresources.client import PodResourcesClient  # grpc only where a kubelet is

        client = PodResourcesClient(args.pod_resources_socket)
        probe.pods = client.source([g.uuid for g in discovered.gpus], node, dra_device_names(nvml))
    elif from_kubelet:
        log.info("no PodResources socket at %s: not reporting pod GPUs", args.pod_resources_socket)
    publisher = Publisher(kube, node, heartbeat_s=args.heartbeat, driver=driver)
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
        if plugin:
            plugin.stop()
