"""Numbers read from objects anyone may write: labels, annotations, spec fields of pods and their owners.

Every count, index, rank, tier and generation gputopo reads from an object goes through ``whole_number``: a whole
number from an int or a string of ASCII digits, with at most ``MAX_DIGITS`` digits and no more than the field's
own bound. Python's ``int()`` would take a string of thousands of digits (and raise past its integer-string
limit), "+3", "1_000", " 7 " and digits of other scripts; none of that is a count a Kubernetes object means, and
an all-digit value of 5,000 characters must be one field's problem, not an exception. ``FieldError`` names the
field; ``shown`` quotes a bad value short enough for an Event.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from gputopo.errors import GputopoError

__all__ = [
    "MAX_DIGITS",
    "MAX_WHOLE",
    "FieldError",
    "failure",
    "parse_time",
    "read_whole",
    "shown",
    "whole_number",
    "whole_numbers",
]

# Enough for any count, index or generation an object carries (resourceVersions and generations are int64 in
# practice: 19 digits at most, and none is near that); far below Python's integer-string limit (4,300 digits).
MAX_DIGITS: Final = 19
MAX_WHOLE: Final = 2**63 - 1
SHOWN_CHARS: Final = 48  # a bad value quoted in a problem, an Event or a status: at most this many characters


class FieldError(GputopoError, ValueError):
    """A field of an object does not hold what it must; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def shown(value: object) -> str:
    """``value`` quoted for a message: a string in double quotes, anything else as its type and repr, cut short."""
    if isinstance(value, str):
        body = value if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]}… ({len(value)} characters)"
        return '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool | int | float | type(None)):
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
            return f"an integer of {value.bit_length()} bits"
        return repr(value)
    return f"a {type(value).__name__}"


def failure(error: BaseException) -> str:
    """What failed, for a refusal: the error's type and its message, cut short."""
    message = str(error)
    if len(message) > 2 * SHOWN_CHARS:
        message = f"{message[: 2 * SHOWN_CHARS]}…"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def whole_number(value: object, *, most: int = MAX_WHOLE) -> int | None:
    """A whole number 0..``most`` from an int or a string of ASCII digits (blanks around it allowed); None for
    anything else, a longer string than ``MAX_DIGITS`` digits included. Never raises."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= most else None
    if isinstance(value, str):
        digits = value.strip()
        if 0 < len(digits) <= MAX_DIGITS and digits.isascii() and digits.isdigit():
            number = int(digits)
            return number if number <= most else None
    return None


def whole_numbers(value: object, *, most: int = MAX_WHOLE, separator: str = ",") -> tuple[int, ...] | None:
    """A list of whole numbers written ``"0,1,2"`` (empty parts skipped); None when any part is not one, or when
    the string is longer than such a list can be. Never raises."""
    if not isinstance(value, str) or len(value) > (MAX_DIGITS + 1) * 65_536:
        return None
    numbers = []
    for part in value.split(separator):
        if not part.strip():
            continue
        number = whole_number(part, most=most)
        if number is None:
            return None
        numbers.append(number)
    return tuple(numbers)


def read_whole(value: object, field: str, *, least: int = 0, most: int = MAX_WHOLE) -> int:
    """``whole_number`` of ``value`` within ``least``..``most``; a ``FieldError`` naming ``field`` otherwise."""
    number = whole_number(value, most=most)
    if number is None or number < least:
        raise FieldError(field, f"{shown(value)} is not a whole number from {least} to {most}")
    return number


def parse_time(value: object) -> datetime | None:
    """An API timestamp (RFC 3339, or a datetime) in UTC; None for anything else."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
