"""The reflector's list-and-watch logic over a scripted API: pages, events, a 410, odd objects, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from gputopo.kube.errors import ApiError
from gputopo.kube.reflector import Reflector, Rhythm


def obj(name: str, value: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}, "data": {"v": value}}


class ScriptedApi:
    """Answers lists from ``lists`` (each a list of pages) and watches from ``watches`` (each a list of
    events), in order; once the script is over, a watch hangs and ``played`` is set (the test then cancels
    the reflector): the test waits for that, not for a guessed time."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]] | Exception]) -> None:
        self.lists, self.watches = lists, watches
        self.list_params: list[dict[str, str]] = []
        self.watch_versions: list[str] = []
        self.played = asyncio.Event()

    async def get(self, what: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        self.list_params.append(dict(params or {}))
        pages = self.lists[0]
        page = pages.pop(0)
        if not pages:
            self.lists.pop(0)
        return page

    async def watch(self, what: str, path: str, params: dict[str, str], *, read_timeout: float) -> AsyncIterator[Any]:
        self.watch_versions.append(params["resourceVersion"])
        if not self.watches:
            self.played.set()
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


def page(items: list[dict[str, Any]], version: str, token: str = "") -> dict[str, Any]:
    return {"items": items, "metadata": {"resourceVersion": version, "continue": token}}


def parse(name: str, o: Mapping[str, Any], before: str | None) -> str:
    value = str(o["data"]["v"])
    if value == "boom":
        raise ValueError("odd object")
    return value


class Backoffs:
    """The reflector's backoff sleeps, recorded instead of waited."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def play(api: ScriptedApi, reflector: Reflector[str]) -> Reflector[str]:
    """Run the reflector until the API's script is played out, then stop it."""
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(api.played.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return reflector


async def drive(api: ScriptedApi, until: Any, backoffs: Backoffs | None = None) -> Reflector[str]:
    changes: list[int] = []
    reflector: Reflector[str] = Reflector(
        api,  # type: ignore[arg-type]
        "Things",
        "/things",
        parse,
        on_change=lambda: changes.append(1),
        rhythm=Rhythm(page_size=2, max_backoff=0.01, sleep=backoffs or Backoffs()),
    )
    await play(api, reflector)
    assert until(reflector), "the script played out before the reflector got there"
    reflector.changes = len(changes)  # type: ignore[attr-defined]
    return reflector


def test_pages_then_events() -> None:
    api = ScriptedApi(
        lists=[[page([obj("a", "1"), obj("b", "2")], "10", token="t"), page([obj("c", "3")], "10")]],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("a", "1b", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                {"type": "DELETED", "object": obj("b", "2", "16")},
                {"type": "ADDED", "object": obj("d", "boom", "17")},  # cannot be read: skipped, nothing lost
            ],
        ],
    )
    r = asyncio.run(drive(api, lambda r: len(api.watch_versions) == 2))
    assert r.items == {"a": "1b", "c": "3"}
    assert api.list_params == [{"limit": "2"}, {"limit": "2", "continue": "t"}]
    assert api.watch_versions == ["10", "17"]  # resumed from the last version seen, bookmarks included


def test_a_410_lists_again_and_lets_go_of_what_vanished() -> None:
    api = ScriptedApi(
        lists=[[page([obj("a", "1"), obj("b", "2")], "10")], [page([obj("a", "1")], "30")]],
        watches=[[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]],
    )
    deleted: list[str] = []

    async def go() -> Reflector[str]:
        reflector: Reflector[str] = Reflector(
            api,  # type: ignore[arg-type]
            "Things",
            "/things",
            parse,
            on_delete=deleted.append,
            rhythm=Rhythm(sleep=Backoffs()),
        )
        await play(api, reflector)
        assert reflector.lists == 2
        return reflector

    r = asyncio.run(asyncio.wait_for(go(), 5))
    assert r.items == {"a": "1"} and deleted == ["b"]


def test_api_errors_back_off_and_list_again() -> None:
    api = ScriptedApi(
        lists=[[page([obj("a", "1")], "10")], [page([obj("a", "2")], "20")]],
        watches=[ApiError("watch Things: connection reset", 0)],
    )
    backoffs = Backoffs()
    r = asyncio.run(drive(api, lambda r: r.lists == 2, backoffs))
    assert r.items == {"a": "2"} and r.lists == 2
    assert backoffs.delays == [0.5]  # one backoff before the second list, and no real wait


def test_a_namespaced_kind_keeps_objects_of_one_name_in_two_namespaces_apart() -> None:
    def claim(namespace: str, name: str, value: str, version: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}, "data": {"v": value}}

    api = ScriptedApi(
        lists=[[page([claim("a", "llm-0-g1", "1", "5"), claim("b", "llm-0-g1", "2", "5")], "5")]],
        watches=[[{"type": "DELETED", "object": claim("a", "llm-0-g1", "1", "6")}]],
    )
    reflector: Reflector[str] = Reflector(
        api,  # type: ignore[arg-type]
        "ResourceClaims",
        "/claims",
        parse,
        namespaced=True,
        rhythm=Rhythm(sleep=Backoffs()),
    )
    asyncio.run(play(api, reflector))
    assert reflector.items == {"b/llm-0-g1": "2"}


def test_what_the_parse_has_no_use_for_is_never_kept_and_is_let_go_when_it_stops_mattering() -> None:
    def wanted(name: str, o: Mapping[str, Any], before: str | None) -> str | None:
        value = str(o["data"]["v"])
        return None if value.startswith("skip") else value

    api = ScriptedApi(
        lists=[[page([obj("a", "1"), obj("b", "skip")], "10")]],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("a", "skip now", "11")},  # kept before: let go
                {"type": "MODIFIED", "object": obj("b", "2", "12")},  # wanted now: kept
                {"type": "ADDED", "object": obj("c", "skip", "13")},  # never kept
            ]
        ],
    )
    deleted: list[str] = []
    changes: list[int] = []
    reflector: Reflector[str] = Reflector(
        api,  # type: ignore[arg-type]
        "Things",
        "/things",
        wanted,
        on_change=lambda: changes.append(1),
        on_delete=deleted.append,
        rhythm=Rhythm(sleep=Backoffs()),
    )
    asyncio.run(play(api, reflector))
    assert reflector.items == {"b": "2"}
    assert deleted == ["a"]
    assert len(changes) == 3  # the list, a let go, b kept; c changed nothing


def test_an_event_that_changes_nothing_kept_leaves_the_very_object_kept() -> None:
    def trimmed(name: str, o: Mapping[str, Any], before: dict[str, str] | None) -> dict[str, str]:
        return {"v": str(o["data"]["v"])}  # a new object each time, as the gang watches' trims make

    api = ScriptedApi(
        lists=[[page([obj("a", "1"), obj("b", "2")], "10")]],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("a", "1", "11")},  # a field the trim drops changed
                {"type": "MODIFIED", "object": obj("b", "3", "12")},
            ]
        ],
    )
    changes: list[dict[str, dict[str, str]]] = []  # what was kept at each change
    reflector: Reflector[dict[str, str]] = Reflector(
        api,  # type: ignore[arg-type]
        "Things",
        "/things",
        trimmed,
        on_change=lambda: changes.append(dict(reflector.items)),
        rhythm=Rhythm(page_size=2, sleep=Backoffs()),
    )
    asyncio.run(play(api, reflector))  # type: ignore[arg-type]
    listed = changes[0]
    assert reflector.items["a"] is listed["a"]  # readers that know it by identity see no change
    assert reflector.items["b"] == {"v": "3"} and reflector.items["b"] is not listed["b"]
    assert len(changes) == 2  # the list, and b
