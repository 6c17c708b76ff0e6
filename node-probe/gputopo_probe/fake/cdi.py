"""CDI specs for fake GPUs: how a prepared ResourceClaim reaches the containers that use it.

A DRA kubelet plugin answers NodePrepareResources with CDI device ids; the kubelet hands them to the container
runtime (containerd reads the specs in ``/etc/cdi`` and ``/var/run/cdi`` when it creates the container) and
the runtime applies each device's ``containerEdits``. NVIDIA's DRA driver writes one spec per claim under the
kind ``k8s.gpu.nvidia.com/claim`` (``cdi.go`` of kubernetes-sigs/dra-driver-nvidia-gpu); a fake GPU has no
device node or library to mount, so its one claim-wide device carries what the container can check: the
same environment variables as the fake device plugin's Allocate, NVIDIA_VISIBLE_DEVICES (UUIDs) and
GPUTOPO_VISIBLE_GPUS (indices). ``claim_spec`` is pure; ``write_spec``/``remove_spec`` are the file side.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from gputopo.topology.model import Gpu
from gputopo_probe.fake.deviceplugin import ENV_INDICES, ENV_UUIDS

__all__ = ["CDI_VERSION", "DEFAULT_CDI_DIR", "KIND", "claim_device_id", "claim_spec", "remove_spec", "write_spec"]

DEFAULT_CDI_DIR: Final = "/var/run/cdi"
CDI_VERSION: Final = "0.6.0"
VENDOR: Final = "k8s.gpu.nvidia.com"
KIND: Final = f"{VENDOR}/claim"


def claim_device_id(claim_uid: str) -> str:
    """The fully qualified CDI name of a claim's device, as the kubelet passes it to the runtime."""
    return f"{KIND}={claim_uid}"


def claim_spec(claim_uid: str, gpus: Sequence[Gpu]) -> dict[str, Any]:
    """The CDI spec of one prepared claim: a device named by the claim's UID that lists its GPUs."""
    ordered = sorted(gpus, key=lambda g: g.index)
    env = [
        f"{ENV_UUIDS}={','.join(g.uuid for g in ordered)}",
        f"{ENV_INDICES}={','.join(str(g.index) for g in ordered)}",
    ]
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": [{"name": claim_uid, "containerEdits": {"env": env}}]}


def _path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{VENDOR}-claim_{claim_uid}.json"


def write_spec(cdi_dir: str | Path, claim_uid: str, gpus: Sequence[Gpu]) -> Path:
    """Write the claim's spec whole (a runtime never reads half a file: it is renamed into place)."""
    directory = Path(cdi_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = _path(directory, claim_uid)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(claim_spec(claim_uid, gpus), indent=2) + "\n")
    os.replace(partial, path)
    return path


def remove_spec(cdi_dir: str | Path, claim_uid: str) -> None:
    _path(Path(cdi_dir), claim_uid).unlink(missing_ok=True)
