"""The images install their Python dependencies from hash-locked lists (hack/lock-requirements.sh): every
dependency pyproject.toml declares for an image is pinned there with hashes, and the Dockerfiles and
hack/build-images.sh use those lists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins(lock: str) -> dict[str, list[str]]:
    """Each pinned distribution and its hashes."""
    pins: dict[str, list[str]] = {}
    current = ""
    for line in lock.splitlines():
        pinned = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if pinned:
            current = pinned.group(1).lower().replace("_", "-")
            pins[current] = []
        elif line.strip().startswith("--hash=sha256:") and current:
            pins[current].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
    return pins


WANTED = {
    "operator": PYPROJECT["project"]["dependencies"],
    "probe": PYPROJECT["project"]["optional-dependencies"]["probe"],
}


@pytest.mark.parametrize("image", sorted(WANTED))
def test_every_dependency_is_pinned_with_hashes(image: str) -> None:
    pins = _pins((ROOT / "images" / image / "requirements.txt").read_text())
    build = PYPROJECT["build-system"]["requires"]
    missing = sorted({_name(r) for r in [*WANTED[image], *build]} - set(pins))
    assert missing == [], f"run hack/lock-requirements.sh: images/{image}/requirements.txt lacks {missing}"
    unhashed = sorted(n for n, hashes in pins.items() if not hashes)
    assert unhashed == []
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for hashes in pins.values() for h in hashes)


def test_the_probe_image_gets_nothing_of_the_operator() -> None:
    pins = _pins((ROOT / "images" / "probe" / "requirements.txt").read_text())
    assert set(pins).isdisjoint({"kopf", "kubernetes", "aiohttp", "typer", "rich", "pydantic-settings"})


@pytest.mark.parametrize("image", sorted(WANTED))
def test_the_images_install_only_the_locked_list(image: str) -> None:
    dockerfile = (ROOT / "images" / image / "Dockerfile").read_text()
    assert f"COPY images/{image}/requirements.txt" in dockerfile
    assert "pip install --require-hashes -r requirements.txt" in dockerfile
    installs = re.findall(r"pip install [^\n&]*", dockerfile)
    assert all("--require-hashes" in i or "--no-deps --no-build-isolation ." in i for i in installs), installs
    assert f"!images/{image}/requirements.txt" in (ROOT / "images" / image / "Dockerfile.dockerignore").read_text()
    build = (ROOT / "hack" / "build-images.sh").read_text()
    assert f"images/{image}/Dockerfile images/{image}/requirements.txt" in build
