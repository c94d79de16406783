"""What the store keeps must be shown again by every view: the checks at the door."""

from __future__ import annotations

import json
import re

import pytest

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.storable import MAX_DEPTH, check_storable, loads_storable


def nested(depth: int) -> object:
    """``depth`` arrays, one inside the other."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_values_a_view_can_show_pass() -> None:
    check_storable(
        {"text": "héllo ✓ 😀", "n": [1, 2.5, None, True], "deep": nested(MAX_DEPTH - 1)}, "x"
    )
    assert loads_storable(b'{"a": [1e308, "\\u00e9"]}', "body") == {"a": [1e308, "é"]}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"a": nested(MAX_DEPTH)}, f"input.a{'.0' * (MAX_DEPTH - 1)}: nested deeper than 64"),
        ({"a": ["\ud800"]}, "input.a.0: a string holds a lone surrogate"),
        ({"\udfff": 1}, "input: a string holds a lone surrogate"),
        ({"budget": {"cost": float("inf")}}, "input.budget.cost: inf is not a finite number"),
        ([float("nan")], "input.0: nan is not a finite number"),
    ],
)
def test_a_value_no_view_could_show_is_refused_naming_the_limit(value: object, said: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(said)):
        check_storable(value, "input")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ('{"x": Infinity}', "body: Infinity is not a finite number"),
        ('{"x": -Infinity}', "body: -Infinity is not a finite number"),
        ('{"x": NaN}', "body: NaN is not a finite number"),
        ('{"x": 1e999}', "body.x: inf is not a finite number"),
        ('{"x": "\\ud800"}', "body.x: a string holds a lone surrogate"),
        ("[" * 100_000 + "]" * 100_000, f"body: nested deeper than {MAX_DEPTH} levels"),
        (json.dumps(nested(MAX_DEPTH + 1)), f"body{'.0' * MAX_DEPTH}: nested deeper"),
    ],
)
def test_a_body_no_view_could_show_is_refused_as_it_is_read(raw: str, said: str) -> None:
    with pytest.raises(InvalidRequest, match="^" + re.escape(said)):
        loads_storable(raw, "body")


def test_what_is_not_json_is_left_to_say_by_the_reader() -> None:
    with pytest.raises(ValueError) as raised:
        loads_storable(b"{not json", "body")
    assert not isinstance(raised.value, InvalidRequest)
