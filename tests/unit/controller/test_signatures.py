"""No function of the operator's decisions or its I/O room takes more than eight parameters: past that, a
function's callers pass a record (``PassInput``, ``Limits``) instead of a row of values."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gputopo

LIMIT = 8
ROOMS = ("control", "controller", "kube")


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def _too_long() -> list[str]:
    root = Path(gputopo.__file__).parent
    found = []
    for room in ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _parameters(node) > LIMIT:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({_parameters(node)})")
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_the_room_exists(room: str) -> None:
    assert (Path(gputopo.__file__).parent / room).is_dir()


def test_no_function_takes_more_than_eight_parameters() -> None:
    assert _too_long() == []
