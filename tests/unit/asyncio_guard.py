"""A test must not leave asyncio tasks behind (kopf's ``_no_asyncio_pending_tasks``).

``asyncio.run`` cancels what is still pending when its coroutine returns, so a forgotten task never
fails anything by itself. ``run_listing_leftovers`` runs a coroutine the same way and says which tasks
were still pending at its end; the unit tests' conftest puts it in place of ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_listing_leftovers"]

T = TypeVar("T")
_REAL_RUN = asyncio.run


def run_listing_leftovers(main: Coroutine[Any, Any, T], leftovers: list[str], **kwargs: Any) -> T:
    """``asyncio.run(main)``, adding to ``leftovers`` a line per task still pending when ``main`` ends."""

    async def checked() -> T:
        try:
            return await main
        finally:
            current = asyncio.current_task()
            leftovers.extend(repr(t) for t in asyncio.all_tasks() if t is not current and not t.done())

    return _REAL_RUN(checked(), **kwargs)
