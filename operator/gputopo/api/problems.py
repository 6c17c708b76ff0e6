"""A pydantic validation error in one line: the field path as a user writes it, and what is wrong there."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

__all__ = ["field_path", "one_line"]


def field_path(loc: Sequence[int | str], root: str = "") -> str:
    """``nodes[3].usedGpus[0]`` from pydantic's ``("nodes", 3, "usedGpus", 0)``."""
    path = root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def one_line(error: ValidationError, root: str = "") -> str:
    """The first problem as ``field: message``, and how many more there are."""
    problems = error.errors(include_url=False)
    if not problems:
        return "invalid"
    first = problems[0]
    loc = [p for p in first.get("loc", ()) if not (isinstance(p, str) and p.startswith(("function-", "tagged-")))]
    message = str(first.get("msg", "invalid")).replace("\n", " ")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{field_path(loc, root)}: {message}{more}"
