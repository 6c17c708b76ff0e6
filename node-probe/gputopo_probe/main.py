"""The ``gputopo-probe`` command: one node's probe loop, ``--once --print``, or a farm of fake probes.

The fakes (``gputopo_probe.fake``, ``farm``) are loaded only in fake mode: on a GPU node the probe imports
NVML, sysfs and the publisher, nothing it would not run.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

import pynvml

from gputopo.topology.model import Topology
from gputopo_probe.discovery.sysfs import Sysfs
from gputopo_probe.errors import ApiError, ProbeError
from gputopo_probe.nvml import Nvml, translate
from gputopo_probe.probe import Probe, to_yaml
from gputopo_probe.roles import NicRoleRules
from gputopo_probe.runner import DEFAULT_CONFIRM_S
from gputopo_probe.testcluster import require_test_cluster

if TYPE_CHECKING:
    from gputopo_probe.fake.node import FakeNode

__all__ = ["build_parser", "main"]

log = logging.getLogger("gputopo_probe")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=float, default=None, help="seconds between health polls")
    p.add_argument("--kubeconfig", default=None, help="else in-cluster, else $KUBECONFIG")
    p.add_argument("--down-after", type=int, default=2, help="polls reading down before a link/NIC is Down")
    p.add_argument("--up-after", type=int, default=2, help="polls reading up before it is Up again")
    p.add_argument(
        "--confirm-interval",
        type=float,
        default=DEFAULT_CONFIRM_S,
        help="seconds between the re-reads that confirm a worse reading (0: at the poll interval)",
    )
    p.add_argument("--fault-dir", default=None, help="fault files of fake nodes (gputopo sandbox fault)")
    p.add_argument("--listen", default="0.0.0.0:8080", help="HOST:PORT for /healthz /readyz /metrics; 0 or off")
    p.add_argument(
        "--heartbeat",
        type=float,
        default=60.0,
        help="seconds between heartbeats (the NodePodGpus written again unchanged)",
    )
    p.add_argument("-v", "--verbose", action="store_true")


def _kubelet_fakes(p: argparse.ArgumentParser) -> None:
    """One fake node's probe: who hands out its GPUs, and where the real kubelet's plugin sockets are."""
    p.add_argument(
        "--fake-allocation",
        choices=["plan", "device-plugin", "kubelet", "dra"],
        default="plan",
        help="fake nodes' pod GPUs: the operator's plan, a model of NVIDIA's device plugin, or (one node on a "
        "real kubelet) a fake device plugin registered with the kubelet and the kubelet's own PodResources "
        "(kubelet), or a ResourceSlice and a DRA kubelet plugin as NVIDIA's DRA driver has (dra)",
    )
    p.add_argument(
        "--device-plugin-dir",
        default="/var/lib/kubelet/device-plugins",
        help="the kubelet's device plugin directory (--fake-allocation kubelet)",
    )
    p.add_argument(
        "--kubelet-plugins-dir",
        default="/var/lib/kubelet/plugins",
        help="where DRA kubelet plugins put their sockets (--fake-allocation dra)",
    )
    p.add_argument(
        "--kubelet-registry-dir",
        default="/var/lib/kubelet/plugins_registry",
        help="the kubelet's plugin registration directory (--fake-allocation dra)",
    )
    p.add_argument("--cdi-dir", default="/var/run/cdi", help="where CDI specs go (--fake-allocation dra)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gputopo-probe", description="Discover and publish a GPU node's topology.")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (env NODE_NAME)")
    p.add_argument("--once", action="store_true", help="discover once and exit")
    p.add_argument("--print", action="store_true", help="print the NodeTopology YAML instead of publishing")
    p.add_argument(
        "--fake", metavar="TOPOLOGY", help="fake NVML and sysfs from nvidia-smi text, YAML or a catalog name"
    )
    p.add_argument(
        "--fake-topology-label",
        default=None,
        metavar="KEY",
        help="with --fake: the node's label KEY, where it has one, names its fake topology instead",
    )
    p.add_argument("--gpu-model", default=None)
    p.add_argument("--sysfs-root", default="/sys")
    p.add_argument(
        "--proc-root",
        default="/proc",
        help="the host's /proc, whose 1/net/route says which NIC carries the default route (a front-end port); "
        "empty: not read",
    )
    p.add_argument("--compute-nics", default="", metavar="REGEX", help="NICs (whole name) that are compute rails")
    p.add_argument("--storage-nics", default="", metavar="REGEX", help="NICs (whole name) that are storage ports")
    p.add_argument("--front-end-nics", default="", metavar="REGEX", help="NICs (whole name) that are front-end ports")
    p.add_argument("--pod-resources-socket", default="/var/lib/kubelet/pod-resources/kubelet.sock")
    _common(p)
    _kubelet_fakes(p)
    return p


def build_farm_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gputopo-probe farm", description="Many fake probes in one process.")
    p.add_argument("--nodes-file", required=True, help="YAML: nodes: [{node, topology, gpuModel}]")
    p.add_argument(
        "--dra",
        action="store_true",
        help="also publish each node's GPUs as a ResourceSlice, the way NVIDIA's DRA driver (gpu.nvidia.com) does",
    )
    p.add_argument(
        "--fake-allocation",
        choices=["plan", "device-plugin"],
        default="plan",
        help="the nodes' pod GPUs (a farm's nodes have no kubelet): the operator's plan, or a model of NVIDIA's "
        "device plugin",
    )
    _common(p)
    return p


def _real_nvml() -> Nvml:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise translate("nvmlInit", error) from error
    return Nvml(pynvml)


def _fake(node: str, topology: Topology, fault_dir: str | None) -> FakeNode:
    from gputopo_probe.fake.faults import FaultStore
    from gputopo_probe.fake.node import FakeNode

    return FakeNode(node, topology, faults=FaultStore(fault_dir) if fault_dir else None)


def _labelled_topology(args: argparse.Namespace, node: str) -> str:
    """The fake topology that the node's ``--fake-topology-label`` names, else ``--fake``."""
    from gputopo_probe.publish.kube import Kube, load_api_client

    try:
        labels = Kube(load_api_client(args.kubeconfig)).node_labels(node)
    except ApiError as error:
        raise ProbeError(f"cannot read node {node}'s labels for --fake-topology-label: {error}") from error
    name = labels.get(args.fake_topology_label, "")
    return name or str(args.fake)


def run_single(args: argparse.Namespace) -> int:
    node = args.node_name or socket.gethostname()
    rules = NicRoleRules.parse(args.compute_nics, args.storage_nics, args.front_end_nics)
    fake: FakeNode | None = None
    if args.fake:
        from gputopo_probe.source import load_fake_topology

        if not (args.once and args.print):
            require_test_cluster("--fake", os.environ)

        source = _labelled_topology(args, node) if args.fake_topology_label else args.fake
        fake = _fake(node, load_fake_topology(source, args.gpu_model), args.fault_dir)
        nvml, sysfs = Nvml(fake.nvml), fake.reader()
    else:
        nvml, sysfs = _real_nvml(), Sysfs(args.sysfs_root, args.proc_root)
    try:
        if args.once and args.print:
            probe = Probe(
                nvml, sysfs, xid_thread=False, before_poll=fake.sync_faults if fake else None, nic_rules=rules
            )
            print(to_yaml(node, probe.poll().status()), end="")
            probe.close()
            return 0
        from gputopo_probe.service import serve_single

        return serve_single(args, node, nvml, sysfs, fake, nic_rules=rules)
    finally:
        if fake is not None:
            fake.close()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the probe the way Ctrl-C does, so the same ``finally`` blocks close the fakes."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    farm = bool(argv) and argv[0] == "farm"
    args = (build_farm_parser() if farm else build_parser()).parse_args(argv[1:] if farm else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if farm:
            from gputopo_probe.farm import run_farm

            require_test_cluster("gputopo-probe farm", os.environ)
            return run_farm(args)
        return run_single(args)
    except ProbeError as error:
        print(f"gputopo-probe: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
