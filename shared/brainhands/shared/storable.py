"""What a value must be for the store to keep it and every view to show it again.

A value is stored as JSON and read back by every view of its session, for ever: one that
the store takes but a view cannot encode (a lone surrogate such as ``"\\ud800"``, which
is no Unicode text; ``Infinity`` or ``NaN``, which JSON has no words for) or that is
nested so deep that reading it back exhausts the decoder breaks its session's every view
from then on. So it is refused where it comes in, by the API and by the clients, with
the limit it breaks named, before anything is written.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from brainhands.shared.errors import InvalidRequest

MAX_DEPTH = 64
"""The deepest a stored value may nest objects and arrays (``{"a": [1]}`` is 2 deep)."""

_SURROGATE = re.compile("[\ud800-\udfff]")

_Where = tuple[object, "_Where"] | None
"""Where a value sits in the value checked, innermost key first (made into a path only
for the error)."""


def check_storable(value: Any, what: str) -> None:
    """``InvalidRequest`` naming the limit if ``value`` (called ``what`` in the error)
    nests deeper than ``MAX_DEPTH``, holds a string with a lone surrogate, or a
    non-finite number."""
    stack: list[tuple[Any, int, _Where]] = [(value, 0, None)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            _check_text(item, what, where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidRequest(
                    f"{_path(what, where)}: {item} is not a finite number "
                    "(JSON has no Infinity or NaN)"
                )
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidRequest(
                    f"{_path(what, where)}: nested deeper than {MAX_DEPTH} levels, "
                    "the most a stored value may be"
                )
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, inner in pairs:
                if isinstance(key, str):
                    _check_text(key, what, where)
                if isinstance(inner, str | float | dict | list | tuple):
                    stack.append((inner, depth + 1, (key, where)))


def loads_storable(raw: bytes | str, what: str) -> Any:
    """``raw`` parsed as JSON, ``InvalidRequest`` for a value ``check_storable`` refuses
    (``Infinity`` and ``NaN`` included, which Python's decoder takes by default);
    ``ValueError`` for what is not JSON at all."""

    def constant(name: str) -> Any:
        raise InvalidRequest(f"{what}: {name} is not a finite number (JSON has no {name})")

    try:
        value = json.loads(raw, parse_constant=constant)
    except RecursionError:
        raise InvalidRequest(
            f"{what}: nested deeper than {MAX_DEPTH} levels, the most a stored value may be"
        ) from None
    check_storable(value, what)
    return value


def _check_text(text: str, what: str, where: _Where) -> None:
    if not text.isascii() and _SURROGATE.search(text):
        raise InvalidRequest(
            f"{_path(what, where)}: a string holds a lone surrogate, which is no Unicode "
            "text (each string must be valid UTF-8)"
        )


def _path(what: str, where: _Where) -> str:
    keys: list[str] = []
    while where is not None:
        key, where = where
        keys.append(str(key))
    return ".".join([what, *reversed(keys)])
