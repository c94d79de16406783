"""``any_of(column, name)``: the rows whose ``column`` is one of a list bound as ``name``.

SQLAlchemy's ``IN`` list (``bindparam(..., expanding=True)``) renders one placeholder per
value at each execution, so every length of list is a statement text of its own: parsed
and planned again by the server, and prepared again by the driver, at the cost of one more
round trip. On PostgreSQL the list is bound as one array instead (``column = ANY(:name)``):
one statement, prepared once, whatever the length. Other dialects keep the ``IN`` list.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ARRAY, ColumnElement, any_, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal, _TraverseInternalsType
from sqlalchemy.types import Boolean


class _AnyOf(ColumnElement[bool]):
    inherit_cache = True
    type = Boolean()
    # SQLAlchemy's cache key: the column and the name (its own declaration is not a ClassVar).
    _traverse_internals: _TraverseInternalsType = [  # noqa: RUF012
        ("column", InternalTraversal.dp_clauseelement),
        ("name", InternalTraversal.dp_string),
    ]

    def __init__(self, column: ColumnElement[Any], name: str) -> None:
        self.column = column
        self.name = name

    def self_group(self, against: Any = None) -> ColumnElement[bool]:
        # A comparison already: not wrapped as ``(...) = 1`` where booleans are integers.
        return self


def any_of(column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
    """``column IN (:name...)``, bound with a list of values (``column = ANY(:name)`` on
    PostgreSQL). An empty list matches no row."""
    return _AnyOf(column, name)


@compiles(_AnyOf)
def _in_list(element: _AnyOf, compiler: SQLCompiler, **kw: Any) -> str:
    listed = element.column.in_(bindparam(element.name, expanding=True))
    return compiler.process(listed, **kw)


@compiles(_AnyOf, "postgresql")
def _any_array(element: _AnyOf, compiler: SQLCompiler, **kw: Any) -> str:
    array = bindparam(element.name, type_=ARRAY(element.column.type))
    return compiler.process(element.column == any_(array), **kw)
