"""One call of the operator's API client against the sandbox, on a client of its own, closed after."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gputopo.kube.client import KubeClient, load_configuration
from gputopo.sandbox.testing import SandboxHandle

T = TypeVar("T")


def run(sandbox: SandboxHandle, call: Callable[[KubeClient], Awaitable[T]], timeout: float | None = None) -> T:
    """``call`` on a new client of the sandbox's API server; with ``timeout``, failing after that many seconds."""

    async def go() -> T:
        client = KubeClient(load_configuration(str(sandbox.kubeconfig)), concurrency=4)
        try:
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(go(), timeout))
