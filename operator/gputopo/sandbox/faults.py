"""Faults injected below the probe: link, NIC and GPU faults go into the fake NVML/sysfs that the probes
read (never into NodeTopology), node faults into the simulated kubelet (kwok), so detection runs the real path.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Literal

import yaml

from gputopo.sandbox.cluster import Sandbox
from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.nodes import KWOK_ANNOTATION
from gputopo_probe.fake.faults import FaultStore

__all__ = ["fabric_fault", "gpu_fault", "link_fault", "nic_fault", "node_fault"]


def _store(sandbox: Sandbox, node: str) -> FaultStore:
    # Only the state file: a fault must not wait for an API round trip (the failover benchmark times from here).
    known = sandbox.node_names()
    if not known:
        raise SandboxError(f"sandbox {sandbox.name!r} has no simulated nodes; start it with `gputopo sandbox up`")
    if node not in known:
        raise SandboxError(f"no simulated node {node!r} in sandbox {sandbox.name!r}; nodes: {', '.join(known)}")
    return FaultStore(sandbox.fault_dir)


def link_fault(sandbox: Sandbox, node: str, a: int, b: int, state: Literal["down", "degraded", "up"]) -> None:
    if a == b:
        raise SandboxError("a link joins two different GPUs (--gpus A,B with A != B)")
    _store(sandbox, node).link(node, a, b, state)


def nic_fault(sandbox: Sandbox, node: str, nic: str, state: Literal["down", "up"]) -> None:
    _store(sandbox, node).nic(node, nic, state)


def gpu_fault(
    sandbox: Sandbox, node: str, gpu: int, *, xid: int | None = None, hot: bool = False, clear: bool = False
) -> None:
    if sum((xid is not None, hot, clear)) != 1:
        raise SandboxError("give exactly one of --xid N, --hot or --clear")
    _store(sandbox, node).gpu(node, gpu, xid=xid, hot=hot, clear=clear)


def fabric_fault(
    sandbox: Sandbox, node: str, state: Literal["down", "degraded", "up"], *, whole_domain: bool = False
) -> list[str]:
    """The node's NVLink fabric (every GPU of an NVL72 tray) reads degraded, down, or healthy again; with
    ``whole_domain``, every node of its NVLink domain does (a rack that lost a switch tray reads ``degraded``
    on all its trays; one whose fabric manager died, ``down``). Returns the nodes changed."""
    store = _store(sandbox, node)
    nodes = [node]
    if whole_domain:
        farm = yaml.safe_load(sandbox.nodes_file.read_text()) if sandbox.nodes_file.exists() else {}
        domain_of = {str(n["node"]): (n.get("fabric") or {}).get("domain") for n in (farm or {}).get("nodes", [])}
        domain = domain_of.get(node)
        if not domain:
            raise SandboxError(f"node {node!r} is in no NVLink domain (use a sandbox with --profile nvl72)")
        nodes = sorted(n for n, d in domain_of.items() if d == domain)
    for name in nodes:
        store.fabric(name, state)
    return nodes


def node_fault(sandbox: Sandbox, node: str, action: Literal["not-ready", "ready", "delete"]) -> None:
    if action == "delete":
        sandbox.kubectl("delete", "node", node, "--wait=false")
        return
    if action == "ready":
        # kwok takes the node back and heartbeats it Ready again.
        sandbox.kubectl("annotate", "--overwrite", "node", node, f"{KWOK_ANNOTATION}=fake")
        return
    # The simulated kubelet stops: kwok lets go of the node, and its Ready condition turns False as a
    # node-lifecycle controller would see a kubelet that stopped posting status.
    sandbox.kubectl("annotate", "node", node, f"{KWOK_ANNOTATION}-")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "gputopo sandbox fault: kubelet stopped posting node status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ]
        }
    }
    sandbox.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))
