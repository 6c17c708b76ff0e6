"""The fixture of a test module that runs a sandbox with Kueue's real manager beside it (``sandbox up --kueue``).

Without a Kueue build (``hack/build-kueue.sh``) the module is skipped on a developer's machine and fails where
it must run: in CI (``CI`` set) and under ``make test`` / ``make integration`` (``GPUTOPO_REQUIRE_KUEUE=1``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gputopo.sandbox.errors import SandboxError
from gputopo.sandbox.kueue_install import find_kueue
from gputopo.sandbox.testing import SandboxHandle, running_sandbox

__all__ = ["kueue_required", "kueue_sandbox"]


def kueue_required() -> bool:
    """Whether a missing Kueue build fails the tests instead of skipping them."""
    return bool(os.environ.get("CI")) or os.environ.get("GPUTOPO_REQUIRE_KUEUE") == "1"


def kueue_sandbox(name: str, **up: Any) -> Callable[..., Any]:
    """A module-scoped ``box`` fixture: a sandbox ``name`` with Kueue; ``up`` goes to ``running_sandbox``."""

    @pytest.fixture(scope="module")
    def box() -> Iterator[SandboxHandle]:
        try:
            find_kueue()
        except SandboxError as error:
            if kueue_required():
                pytest.fail(str(error))
            pytest.skip(str(error))
        with running_sandbox(name, kueue=True, **up) as handle:
            yield handle

    return box
