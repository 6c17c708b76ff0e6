"""The one reader of numbers from objects: bounded in digits and value, never raising, its errors naming the field."""

from __future__ import annotations

import pytest

from gputopo.api.fields import MAX_DIGITS, FieldError, failure, read_whole, shown, whole_number, whole_numbers

HUGE = "9" * 5000  # past Python's integer-string limit: int() raises on it

WHOLE = {
    "int": (7, 7),
    "zero": (0, 0),
    "decimal string": ("42", 42),
    "blanks around": (" 3 ", 3),
    "most digits": ("1" * MAX_DIGITS, int("1" * MAX_DIGITS)),
    "one digit too many": ("1" * (MAX_DIGITS + 1), None),
    "5,000 digits": (HUGE, None),
    "negative int": (-1, None),
    "negative string": ("-1", None),
    "plus sign": ("+3", None),
    "underscores": ("1_000", None),
    "arabic-indic digit": ("٣", None),
    "superscript two": ("²", None),
    "mathematical nine": ("\U0001d7d7", None),
    "float": (2.0, None),
    "bool": (True, None),
    "none": (None, None),
    "list": ([1], None),
    "empty": ("", None),
    "blank": ("   ", None),
    "huge int": (10**40, None),
}


@pytest.mark.parametrize(("value", "expected"), WHOLE.values(), ids=WHOLE.keys())
def test_whole_number(value: object, expected: int | None) -> None:
    assert whole_number(value) == expected


def test_whole_number_keeps_to_the_fields_bound() -> None:
    assert whole_number("8192", most=8192) == 8192
    assert whole_number("8193", most=8192) is None
    assert whole_number(8193, most=8192) is None


LISTS = {
    "gpus": ("0,1,2", (0, 1, 2)),
    "empty parts skipped": ("0,,3,", (0, 3)),
    "empty": ("", ()),
    "a part too big": ("0,64", None),
    "a huge part": (f"0,{HUGE}", None),
    "a negative part": ("0,-1", None),
    "not a string": ([0, 1], None),
}


@pytest.mark.parametrize(("value", "expected"), LISTS.values(), ids=LISTS.keys())
def test_whole_numbers(value: object, expected: tuple[int, ...] | None) -> None:
    assert whole_numbers(value, most=63) == expected


def test_read_whole_names_the_field_and_shows_the_value_short() -> None:
    with pytest.raises(FieldError) as raised:
        read_whole(HUGE, "label gputopo.io/gang-size", least=1, most=8192)
    message = str(raised.value)
    assert message.startswith('label gputopo.io/gang-size: "999')
    assert "(5000 characters)" in message and len(message) < 160
    assert raised.value.field == "label gputopo.io/gang-size"
    assert read_whole("12", "x", least=1) == 12


SHOWN = {
    "string": ("abc", '"abc"'),
    "quotes escaped": ('a"b', '"a\\"b"'),
    "long string": ("x" * 100, '"' + "x" * 48 + '… (100 characters)"'),
    "int": (5, "5"),
    "huge int": (10**40, "an integer of 133 bits"),
    "mapping": ({"a": 1}, "a dict"),
}


@pytest.mark.parametrize(("value", "expected"), SHOWN.values(), ids=SHOWN.keys())
def test_shown(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_failure_names_the_error_and_cuts_its_message() -> None:
    assert failure(KeyError("rank")) == "KeyError: 'rank'"
    assert failure(RuntimeError()) == "RuntimeError"
    assert len(failure(ValueError("x" * 1000))) < 120
