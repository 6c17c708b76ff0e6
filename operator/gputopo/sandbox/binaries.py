"""Where the pinned Kubernetes binaries are, and a clear message when they are not there yet."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gputopo.sandbox.errors import SandboxError

__all__ = ["KUBE_VERSION", "REQUIRED", "Binaries", "cache_root", "find_binaries", "repo_hack_script"]

KUBE_VERSION = os.environ.get("KUBE_VERSION", "v1.37.2")
REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
)


def cache_root() -> Path:
    base = os.environ.get("GPUTOPO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "gputopo"
    )
    return Path(base)


def repo_hack_script() -> Path | None:
    """hack/build-k8s.sh of a source checkout, when gputopo runs from one."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "hack" / "build-k8s.sh"
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class Binaries:
    bin_dir: Path

    def path(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def helm(self) -> Path:
        return self.path("helm")


def find_binaries() -> Binaries:
    """The cache's bin directory, or a SandboxError that says how to build it."""
    bin_dir = Path(os.environ.get("GPUTOPO_K8S_BIN", str(cache_root() / f"k8s-{KUBE_VERSION}" / "bin")))
    missing = [name for name in REQUIRED if not (bin_dir / name).is_file()]
    if missing:
        script = repo_hack_script()
        how = f"bash {script}" if script else "hack/build-k8s.sh from a gputopo source checkout"
        go_hint = "" if shutil.which("go") else " It needs the Go toolchain (>= 1.26), which is not on PATH."
        raise SandboxError(
            f"the Kubernetes binaries are not built yet (missing in {bin_dir}: {', '.join(missing)}). "
            f"Build them once with `{how}` (about 20-40 minutes cold).{go_hint}"
        )
    return Binaries(bin_dir)
