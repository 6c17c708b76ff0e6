"""One error tree per side: every exception the operator side defines is a GputopoError, every one the probe
defines a ProbeError (its ApiError is both: the Kubernetes boundary's API error)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from gputopo.errors import GputopoError
from gputopo.kube.errors import ApiError
from gputopo_probe.errors import ApiError as ProbeApiError
from gputopo_probe.errors import ProbeError

ROOT = Path(__file__).resolve().parents[2]
SIDES = {"gputopo": (ROOT / "operator", GputopoError), "gputopo_probe": (ROOT / "node-probe", ProbeError)}


def _exceptions() -> list[tuple[str, str, type[BaseException]]]:
    found = []
    for package, (base_dir, root) in SIDES.items():
        for path in sorted((base_dir / package).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            classes = [n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.bases]
            if not any(name.endswith(("Error", "Exception")) for name in classes):
                continue
            module = importlib.import_module(".".join(path.relative_to(base_dir).with_suffix("").parts))
            for name in classes:
                cls = getattr(module, name)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append((f"{module.__name__}.{name}", package, root))
    return found


EXCEPTIONS = _exceptions()


@pytest.mark.parametrize(("name", "side", "root"), EXCEPTIONS, ids=[name for name, _, _ in EXCEPTIONS])
def test_every_exception_derives_from_its_sides_root(name: str, side: str, root: type[BaseException]) -> None:
    module, _, attr = name.rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), attr), root)


def test_the_probes_api_error_is_the_kubernetes_boundarys() -> None:
    error = ProbeApiError("patch NodeTopology n1", 409, "Conflict")
    assert isinstance(error, ApiError) and isinstance(error, ProbeError)
    assert (error.status, error.reason, error.retryable, str(error)) == (
        409,
        "Conflict",
        True,
        "patch NodeTopology n1: HTTP 409 Conflict",
    )
