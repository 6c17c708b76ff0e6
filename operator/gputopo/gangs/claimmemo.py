"""The claims the last read of the gangs made, for the next read to reuse while neither the pod nor any owner
object its sources looked up has changed.

A claim is made from the pod's body and the owner objects its sources look up (a PodGroup, a Job, a JobSet, ...,
a ResourceClaimTemplate's GPU count), nothing else. Each lookup is recorded as it is made, with what it found
(nothing, too); the claim holds while the pod is the same body and every lookup finds the same again (the same
body: the watches keep a new one for each change). A source that asked more of an owners' map than one key (its
size, its keys) leaves a claim that is not kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from gputopo.gangs.claims import Owners, Raw

__all__ = ["ClaimMemo"]

Key = tuple[str, str]
V = TypeVar("V")
T = TypeVar("T")

_WHOLE = ("", ("", ""), None)  # a lookup that saw more than one key: the claim is not kept
Lookup = tuple[str, Key, object]  # (the owners' map, the key, what it found)


class _Looked(Mapping[Key, V], Generic[V]):
    """One owners' map, every lookup into it recorded in ``seen``."""

    __slots__ = ("_map", "_name", "_seen")

    def __init__(self, found: Mapping[Key, V], name: str, seen: list[Lookup]) -> None:
        self._map, self._name, self._seen = found, name, seen

    def __getitem__(self, key: Key) -> V:
        try:
            value = self._map[key]
        except KeyError:
            self._seen.append((self._name, key, None))
            raise
        self._seen.append((self._name, key, value))
        return value

    def __iter__(self) -> Iterator[Key]:
        self._seen.append(_WHOLE)
        return iter(self._map)

    def __len__(self) -> int:
        self._seen.append(_WHOLE)
        return len(self._map)


def _same(before: object, now: object) -> bool:
    if before is now:
        return True
    return not isinstance(before, Mapping) and before is not None and before == now  # a template's count


class ClaimMemo(Generic[T]):
    """What ``claim`` said of each pod at the last read (a claim, a refusal, nothing), by pod body, with the lookups
    it made. An entry holds its body, so a body's identity cannot be taken by another object while the entry lives."""

    __slots__ = ("_last", "_now")

    def __init__(self) -> None:
        self._last: dict[int, tuple[Raw, bool, T, tuple[Lookup, ...]]] = {}
        self._now: dict[int, tuple[Raw, bool, T, tuple[Lookup, ...]]] = {}

    def claim(self, pod: Raw, owners: Owners, claim: Callable[[Raw, Owners], T]) -> T:
        """``claim(pod, owners)``, or what it said last time when nothing it read has changed since."""
        templated = owners.claim_templates is not None
        kept = self._last.get(id(pod))
        if kept is not None and kept[0] is pod and kept[1] == templated and _still(kept[3], owners):
            self._now[id(pod)] = kept
            return kept[2]
        seen: list[Lookup] = []
        looked = Owners(
            podgroups=_Looked(owners.podgroups, "podgroups", seen),
            jobs=_Looked(owners.jobs, "jobs", seen),
            jobsets=_Looked(owners.jobsets, "jobsets", seen),
            leaderworkersets=_Looked(owners.leaderworkersets, "leaderworkersets", seen),
            pytorchjobs=_Looked(owners.pytorchjobs, "pytorchjobs", seen),
            claim_templates=_wrapped(owners.claim_templates, "claim_templates", seen),
        )
        found = claim(pod, looked)
        if _WHOLE not in seen:
            self._now[id(pod)] = (pod, templated, found, tuple(seen))
        return found

    def done(self) -> None:
        """End a read: what it did not ask for is forgotten."""
        self._last, self._now = self._now, {}

    def __len__(self) -> int:
        return len(self._last)


def _wrapped(found: Mapping[Key, V] | None, name: str, seen: list[Lookup]) -> Mapping[Key, V] | None:
    return None if found is None else _Looked(found, name, seen)


def _still(lookups: tuple[Lookup, ...], owners: Owners) -> bool:
    for name, key, before in lookups:
        found: Mapping[Key, object] | None = getattr(owners, name)
        if found is None or not _same(before, found.get(key)):
            return False
    return True
