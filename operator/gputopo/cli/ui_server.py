"""``gputopo ui``: the live topology map, read-only, on 127.0.0.1.

One background task reads the cluster every ``interval`` seconds (the same reading and parsing as ``kubectl
gputopo status``) and keeps the map's document; the page polls ``/api/map`` and redraws when its
``observedAt`` moves. The page is plain HTML, JS and SVG from the package (``gputopo/cli/static``): no CDN, no
build step. Nothing here writes to the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from gputopo.cli.live import read_objects
from gputopo.control.explain import live_cluster, topology_map
from gputopo.control.explain.cluster import TopologyMemo
from gputopo.kube.client import KubeClient, load_configuration
from gputopo.kube.errors import KubeError
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import DEFAULT_TIERS, TierConfig

__all__ = ["STATIC", "make_app", "serve"]

STATIC = ("index.html", "map.js", "map.css")
_TYPES = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
_log = logging.getLogger("gputopo.ui")


class _MapState:
    def __init__(self) -> None:
        self.body = b'{"observedAt": null}'
        self.error = ""
        self.ready = asyncio.Event()


async def _refresh(client: KubeClient, state: _MapState, interval: float, tiers: TierConfig) -> None:
    memo: TopologyMemo = {}  # NodeTopologies parsed once per resourceVersion
    cache = PlacementCache()  # what the engine works out per topology, kept as the operator keeps it
    while True:
        try:
            objects, unread = await read_objects(client)
            cluster = live_cluster(objects, tiers, datetime.now(UTC), memo, cache)
            document: dict[str, Any] = topology_map(cluster)
            document["unread"] = unread
            content = json.dumps({k: v for k, v in document.items() if k != "observedAt"}, sort_keys=True)
            document["version"] = hashlib.sha256(content.encode()).hexdigest()[:16]
            state.body, state.error = json.dumps(document, separators=(",", ":")).encode(), ""
        except KubeError as error:
            state.error = str(error)
            _log.warning("cannot read the cluster: %s", error)
        state.ready.set()
        await asyncio.sleep(interval)


def make_app(client: KubeClient, interval: float, tiers: TierConfig = DEFAULT_TIERS) -> web.Application:
    state = _MapState()
    app = web.Application()
    static = resources.files("gputopo.cli") / "static"

    async def page(request: web.Request) -> web.Response:
        name = request.match_info.get("name") or "index.html"
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=(static / name).read_bytes(), content_type=_TYPES[name.rsplit(".", 1)[1]])

    async def document(_: web.Request) -> web.Response:
        await state.ready.wait()
        if state.error:
            return web.json_response({"error": state.error}, status=503)
        return web.Response(body=state.body, content_type="application/json", headers={"Cache-Control": "no-store"})

    async def start(app: web.Application) -> None:
        app["refresh"] = asyncio.create_task(_refresh(client, state, interval, tiers))

    async def stop(app: web.Application) -> None:
        app["refresh"].cancel()
        await asyncio.gather(app["refresh"], return_exceptions=True)
        await client.close()

    app.router.add_get("/", page)
    app.router.add_get("/{name}", page)
    app.router.add_get("/api/map", document)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


def serve(
    address: str, port: int, interval: float, kubeconfig: str | None = None, tiers: TierConfig = DEFAULT_TIERS
) -> None:
    """Serve until interrupted; prints the map's address first (port 0 picks a free one)."""
    client = KubeClient(load_configuration(kubeconfig), concurrency=8)
    app = make_app(client, interval, tiers)

    async def run() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, address, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        print(f"gputopo map on http://{address}:{bound}/ (read-only; Ctrl-C to stop)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
