"""How every `gputopo` command answers bad input: one line on stderr naming the file and the field, exit 2.

Loaders below the CLI raise the project's own errors with the field at fault (``ClusterFileError``,
``TemplateError``, ``TopologyError``); commands add the file's name and call ``fail``. Nothing a user can type
should reach Python's traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
import yaml

from gputopo.errors import GputopoError

T = TypeVar("T")

__all__ = ["CliError", "fail", "read_text", "read_yaml", "read_yaml_documents"]


class CliError(GputopoError):
    """A user-facing failure: printed to stderr as one line, exit code 2."""


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(2)


def read_text(path: Path, *, missing: str = "no such file") -> str:
    """The file's text, or a ``CliError`` saying why it cannot be read (``missing`` when it does not exist)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a file") from None
    except OSError as error:
        raise CliError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a text file") from None


def read_yaml(path: Path) -> Any:
    """The file's YAML (or JSON) document, or a ``CliError`` naming the line where it stops being YAML."""
    return _parsed(path, yaml.safe_load)


def read_yaml_documents(path: Path) -> list[Any]:
    """Every document of a multi-document YAML file (empty ones left out), or a ``CliError`` as ``read_yaml``."""
    return _parsed(path, lambda text: [d for d in yaml.safe_load_all(text) if d is not None])


def _parsed(path: Path, parse: Callable[[str], T]) -> T:
    text = read_text(path)
    try:
        return parse(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise CliError(f"{path}: not valid YAML{where}: {error.problem or error.context}") from None
    except yaml.YAMLError as error:
        raise CliError(f"{path}: not valid YAML: {error}") from None
