"""A lean list-and-watch of one kind: each object becomes small facts the moment it is read.

kopf keeps every watched object's raw body queued for a per-object worker; for 1,000 Nodes and their
NodeTopologies that held ~130 MB and took ~40 s before the first pass. Here a list is read a page at a
time and each page is turned into facts before the next one is asked for, and each watch event is
dropped once parsed, so memory stays the facts plus one page. A watch that ends is resumed from the
last resourceVersion; one the server calls too old (410 Gone) starts again with a list, and objects that
vanished meanwhile are let go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gputopo.kube.client import KubeClient
from gputopo.kube.errors import ApiError, KubeError

__all__ = ["Parse", "Reflector", "Rhythm"]

logger = logging.getLogger("gputopo.kube")

V = TypeVar("V")
# (name, the object, what was kept for it before) -> what to keep now; None: keep nothing for it (an object the
# watch has no use for, e.g. a pod that is no gang's: dropped if it was kept before)
Parse = Callable[[str, Mapping[str, Any], V | None], V | None]


class _GoneError(KubeError):
    """The server no longer has the history a watch asked for: list again."""


@dataclass(frozen=True, slots=True)
class Rhythm:
    """How a reflector reads: objects per list page, seconds per watch, the longest backoff after an error, and
    the backoff's wait (tests step it without waiting)."""

    page_size: int = 100
    watch_seconds: int = 300
    max_backoff: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


class Reflector(Generic[V]):
    def __init__(
        self,
        client: KubeClient,
        kind: str,
        path: str,
        parse: Parse[V],
        *,
        on_change: Callable[[], None] = lambda: None,
        on_delete: Callable[[str], None] = lambda _: None,
        namespaced: bool = False,
        rhythm: Rhythm = Rhythm(),
    ) -> None:
        self.client, self.kind, self.path, self.parse = client, kind, path, parse
        self.on_change, self.on_delete = on_change, on_delete
        self.rhythm = rhythm
        self._name = _qualified_name if namespaced else _name  # namespaced kinds are kept as "namespace/name"
        self.items: dict[str, V] = {}
        self.synced = asyncio.Event()
        self.lists = 0  # how many times the whole kind was listed (1 + relists)

    async def run(self) -> None:
        """List, then watch, forever (until cancelled); API errors back off and list again."""
        backoff = 0.5
        while True:
            try:
                version = await self._list()
                backoff = 0.5
                while True:
                    version = await self._watch(version)
            except _GoneError:
                logger.info("%s: the watch is too old, listing again", self.kind)
                continue
            except ApiError as exc:
                logger.warning("%s: %s; listing again in %.1fs", self.kind, exc, backoff)
            except Exception:  # never let the watch die: the loop would stop seeing the cluster
                logger.exception("%s: the watch failed; listing again in %.1fs", self.kind, backoff)
            else:
                continue
            await self.rhythm.sleep(backoff)
            backoff = min(backoff * 2, self.rhythm.max_backoff)

    def _keep(self, name: str, obj: Mapping[str, Any]) -> bool:
        """Parse ``obj`` into the store; True when what is kept changed (else the object kept before stays)."""
        before = self.items.get(name)
        try:
            value = self.parse(name, obj, before)
        except Exception:  # one odd object must never stop the watch
            logger.exception("%s %s: could not be read; keeping what was known", self.kind, name)
            return False
        if value is None:
            return self._drop(name)
        if before is not None and value == before:
            return False  # what is kept stays the very object it was: readers may know it by its identity
        self.items[name] = value
        return True

    def _drop(self, name: str) -> bool:
        if self.items.pop(name, None) is None:
            return False
        self.on_delete(name)
        return True

    async def _list(self) -> str:
        seen: set[str] = set()
        changed = False
        params = {"limit": str(self.rhythm.page_size)}
        while True:
            page = await self.client.get(f"list {self.kind}", self.path, params)
            for obj in page.get("items") or []:
                name = self._name(obj)
                if name:
                    seen.add(name)
                    changed |= self._keep(name, obj)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            params = {"limit": str(self.rhythm.page_size), "continue": str(token)}
        for name in [n for n in self.items if n not in seen]:
            changed |= self._drop(name)
        self.lists += 1
        self.synced.set()
        if changed:
            self.on_change()
        return str(meta.get("resourceVersion") or "")

    async def _watch(self, version: str) -> str:
        params = {
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.rhythm.watch_seconds),
        }
        stream = self.client.watch(f"watch {self.kind}", self.path, params, read_timeout=self.rhythm.watch_seconds + 30)
        async for event in stream:
            if not isinstance(event, dict):
                continue
            kind, obj = event.get("type"), event.get("object")
            obj = obj if isinstance(obj, dict) else {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _GoneError()
                raise ApiError(f"watch {self.kind}: {obj.get('message', 'error')}", int(obj.get("code") or 0))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            name = self._name(obj)
            if not name:
                continue
            if kind == "DELETED":
                changed = self._drop(name)
            elif kind in ("ADDED", "MODIFIED"):
                changed = self._keep(name, obj)
            else:
                continue
            if changed:
                self.on_change()
        return version


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def _qualified_name(obj: Any) -> str:
    name = _name(obj)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    namespace = str(meta.get("namespace") or "") if isinstance(meta, dict) else ""
    return f"{namespace}/{name}" if name and namespace else ""
