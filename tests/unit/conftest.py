import asyncio
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from asyncio_guard import run_listing_leftovers


@pytest.fixture(autouse=True)
def _no_asyncio_tasks_left_behind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test whose event loop ends with tasks still pending (asyncio.run would cancel them quietly)."""
    leftovers: list[str] = []

    def run(main: Coroutine[Any, Any, Any], **kwargs: Any) -> Any:
        return run_listing_leftovers(main, leftovers, **kwargs)

    monkeypatch.setattr(asyncio, "run", run)
    yield
    assert not leftovers, f"asyncio tasks left behind: {leftovers}"
