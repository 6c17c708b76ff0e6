"""`kubectl gputopo` as kubectl and krew find it: the console script, the krew manifest and its archive, the map's
files in the package data, and one-line errors for bad input."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gputopo.cli.kubectl import COMMANDS, app, tier_config
from gputopo.cli.ui_server import STATIC

ROOT = Path(__file__).parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_kubectl_finds_the_console_script() -> None:
    assert PYPROJECT["project"]["scripts"]["kubectl-gputopo"] == "gputopo.cli.kubectl:app"
    assert {"explain", "status", "ui"} <= set(COMMANDS)


def test_the_map_ships_in_the_package_data() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["gputopo"]
    static = ROOT / "operator" / "gputopo" / "cli" / "static"
    for name in STATIC:
        assert (static / name).is_file()
        assert any(fnmatch(f"cli/static/{name}", p) for p in patterns), name
    page = "".join((static / n).read_text() for n in STATIC)
    assert "http://" not in page.replace("http://127.0.0.1", "") and "https://" not in page  # no CDN


def test_the_krew_manifest_carries_the_archives_sha256() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "build-krew-archive.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    manifest = yaml.safe_load((ROOT / "plugins" / "gputopo.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "gputopo"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["bin"] == "kubectl-gputopo"


BAD = [
    ("output", ["status", "-o", "yaml"], "error: -o/--output: 'yaml' is neither text nor json"),
    ("kubeconfig", ["status", "--kubeconfig", "/nonexistent/kubeconfig"], "error: cannot read the cluster:"),
]


@pytest.mark.parametrize(("args", "said"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_one_line_and_exit_2(args: list[str], said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(said) and result.stderr.count("\n") == 1


TIERS = [
    ("default", "", ("fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1")),
    ("one", "rack", ("rack",)),
    ("spaces", " rack , block ,", ("rack", "block")),
]


@pytest.mark.parametrize(("labels", "expected"), [c[1:] for c in TIERS], ids=[c[0] for c in TIERS])
def test_tier_labels_as_the_operators_setting(labels: str, expected: tuple[str, ...]) -> None:
    assert tuple(level.label for level in tier_config(labels).levels) == expected
