"""What the probe loads: its image installs only the "probe" extra, and a real node never imports the fakes."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# The probe's source: its own package, the two operator packages it may import and the pure error modules
# its ApiError derives from (an import contract holds it to those).
PROBE_SOURCES = [
    ROOT / "node-probe" / "gputopo_probe",
    ROOT / "operator" / "gputopo" / "api",
    ROOT / "operator" / "gputopo" / "topology",
    ROOT / "operator" / "gputopo" / "errors.py",
    ROOT / "operator" / "gputopo" / "kube" / "__init__.py",
    ROOT / "operator" / "gputopo" / "kube" / "errors.py",
]


def _probe_extra() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.match(r"[A-Za-z0-9._-]+", r) for r in project["optional-dependencies"]["probe"])
    return {_normal(m.group(0)) for m in names if m}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party modules the probe's source imports, with a file that imports each."""
    found: dict[str, set[str]] = {}
    for folder in PROBE_SOURCES:
        for path in [folder] if folder.is_file() else folder.rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue  # generated; they import grpc and protobuf, as podresources/client.py does
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    tops = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top in sys.stdlib_module_names or top in ("gputopo", "gputopo_probe", "__future__"):
                        continue
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_probe_extra_holds_every_distribution_the_probe_imports() -> None:
    distributions = importlib.metadata.packages_distributions()
    extra = _probe_extra()
    missing = {
        module: sorted(files)
        for module, files in _third_party_imports().items()
        if not any(_normal(d) in extra for d in distributions.get(module, []))
    }
    assert missing == {}, "add their distributions to the probe extra in pyproject.toml"


def test_the_probe_extra_leaves_out_the_operator_and_the_cli() -> None:
    assert _probe_extra().isdisjoint({"kopf", "kubernetes", "aiohttp", "typer", "rich", "pydantic-settings"})


_LOADED = """
import sys
import gputopo_probe.main, gputopo_probe.service
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"kopf", "kubernetes", "aiohttp", "typer", "rich"}
                or m.startswith(("gputopo_probe.fake", "gputopo_probe.farm", "gputopo.controller", "gputopo.cli",
                                  "gputopo.kube.client", "gputopo.kube.reflector", "gputopo.sim")))
print(",".join(loaded))
"""


@pytest.mark.timeout(60)
def test_a_real_node_probe_loads_no_fakes_and_no_operator() -> None:
    done = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == ""
