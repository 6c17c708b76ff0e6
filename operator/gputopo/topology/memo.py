"""The one cache design of the pure core: typed tables of values derived from immutable data.

A ``Memo`` belongs to an immutable owner (a Topology, the estimator's tables of one, a Snapshot with the
snapshots derived from it) and lives and dies with it. A ``Table`` names one kind of derived value and types
its keys and values, so a reader sees what is kept and mypy checks what is stored. ``SharedTable`` is the
same idea across owners: a bounded, least-recently-used table for values that many owners with equal
content share. Every value is a pure function of its key (and owner), so a cache changes nothing but the
time taken.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Memo", "SharedTable", "Table"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Table(Generic[K, V]):
    """The name of one table in a Memo, with the types of its keys and values.

    A table holding one value per owner has the key type ``None``.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Table({self.name!r})"


class Memo:
    """Typed tables of values derived from the owner; hot loops take a table's dict once."""

    __slots__ = ("_tables",)

    def __init__(self) -> None:
        self._tables: dict[Table[Any, Any], dict[Any, Any]] = {}

    def table(self, table: Table[K, V]) -> dict[K, V]:
        found = self._tables.get(table)
        if found is None:
            found = self._tables[table] = {}
        return found

    def size(self) -> int:
        """Rows in all tables."""
        return sum(len(rows) for rows in self._tables.values())


class SharedTable(Generic[K, V]):
    """A bounded table shared by owners with equal content, least recently used out first; thread-safe."""

    __slots__ = ("_entries", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The value for ``key``; ``build`` runs outside the lock, and the first value stored wins."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        value = build()
        with self._lock:
            value = self._entries.setdefault(key, value)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
