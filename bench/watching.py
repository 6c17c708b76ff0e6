"""A list-then-watch loop for benchmarks: every object of one list call is handed to ``observe`` with the
monotonic time it arrived, first from the list, then from a watch resumed at the list's resourceVersion
(reconnecting from the last version seen, listing again after a 410).

Typed objects (``V1Pod``) and plain dicts (custom objects) both work; a bookmark only moves the version on.
With ``raw`` a typed API's objects arrive as plain dicts too (no model deserialisation: the kubernetes
client's is slow enough to make a busy benchmark's own watch lag by seconds).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

__all__ = ["Watcher", "field_of", "resource_version"]


def field_of(obj: Any, key: str) -> Any:
    """``obj[key]`` of a dict, else the attribute of a typed object (snake_case of ``key``)."""
    if isinstance(obj, dict):
        return obj.get(key)
    attribute = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
    return getattr(obj, attribute, None)


def resource_version(obj: Any) -> str | None:
    meta = field_of(obj, "metadata")
    version = field_of(meta, "resourceVersion") if meta is not None else None
    return str(version) if version else None


@dataclass
class Watcher:
    """Calls ``observe(obj, arrived)`` for every object ``list_call(*args, **kwargs)`` lists or watches."""

    list_call: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    observe: Callable[[Any, float], None]
    name: str = "watch"
    raw: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Watcher:
        threading.Thread(target=self._run, name=self.name, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    if self.raw:
                        listed = json.loads(self.list_call(*self.args, **self.kwargs, _preload_content=False).data)
                    else:
                        listed = self.list_call(*self.args, **self.kwargs)
                    now = time.monotonic()
                    for obj in field_of(listed, "items") or []:
                        self.observe(obj, now)
                    version = resource_version(listed)
                extra = {"deserialize": False} if self.raw else {}
                stream = k8s_watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self.list_call,
                    *self.args,
                    **self.kwargs,
                    **extra,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=5,
                )
                for event in stream:
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        version = None
                        break
                    version = resource_version(obj) or version
                    if kind in ("ADDED", "MODIFIED") and not (isinstance(obj, dict) and "spec" not in obj):
                        self.observe(obj, time.monotonic())
                    if self._stop.is_set():
                        return
            except k8s.ApiException as error:
                if error.status == 410:
                    version = None
                time.sleep(0.2)
            except Exception as error:  # a dropped connection: carry on from the last version seen
                if self._stop.is_set():
                    return
                print(f"[{self.name}] {error!r}; reconnecting", file=sys.stderr, flush=True)
                time.sleep(0.2)
