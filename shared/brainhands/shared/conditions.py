"""Approval conditions: when a call of a tool needs a person's decision, said over the
call's arguments (``@tool(approval=arg("amount") > 100)``).

A condition is data, not code. Whether a call needs approval is decided by the Brain, in
the commit that records the call (``brain.dispatch``, ``brain.agent``), and the Brain
never imports tool code: it knows a tool by the declaration its Hands published. So the
condition travels in that declaration as JSON, and the Brain evaluates it with this
module's pure ``approval_reason``. A function of the argument model could only run in the
Hands, after the call was dispatched -- too late to hold it, and it would cost every call
of the tool a round trip to find out whether it may run.

The answer is recorded, never worked out again: the commit that decides it holds either
the tool task (no approval needed) or the approval task (with the reason), so a Brain that
dies before that commit decides afresh from the same arguments, and one after it finds the
decision made. A condition that cannot be evaluated on a call's arguments (an argument
missing, a number compared with a string, an operator a newer build wrote) does not let
the call through: the call waits for approval, and the approver reads why.

The JSON forms::

    {"arg": ["amount"], "op": ">", "value": 100}     ops: == != < <= > >= in
    {"all": [<condition>, ...]}   {"any": [<condition>, ...]}   {"not": <condition>}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Op = Literal["==", "!=", "<", "<=", ">", ">=", "in"]
_ORDERED = frozenset({"<", "<=", ">", ">="})
_OPS: frozenset[str] = frozenset({"==", "!=", "in"}) | _ORDERED


class ConditionError(ValueError):
    """A condition that cannot be evaluated on these arguments, or is not a condition."""


class Condition:
    """A condition on a call's arguments; combine with ``&``, ``|`` and ``~``."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __and__(self, other: Condition) -> Condition:
        return _Combined("all", (self, other))

    def __or__(self, other: Condition) -> Condition:
        return _Combined("any", (self, other))

    def __invert__(self) -> Condition:
        return _Negated(self)

    def __repr__(self) -> str:
        return describe(self.to_json())


@dataclass(frozen=True, repr=False)
class _Compare(Condition):
    path: tuple[str, ...]
    op: Op
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {"arg": list(self.path), "op": self.op, "value": self.value}


@dataclass(frozen=True, repr=False)
class _Combined(Condition):
    how: Literal["all", "any"]
    parts: tuple[Condition, ...]

    def to_json(self) -> dict[str, Any]:
        return {self.how: [p.to_json() for p in self.parts]}


@dataclass(frozen=True, repr=False)
class _Negated(Condition):
    inner: Condition

    def to_json(self) -> dict[str, Any]:
        return {"not": self.inner.to_json()}


@dataclass(frozen=True)
class Arg:
    """An argument of the call, by name (``arg("amount")``) or by a dotted path into nested
    objects (``arg("payee.country")``); compared, it makes a ``Condition``."""

    path: tuple[str, ...]

    def _compare(self, op: Op, value: Any) -> Condition:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"a condition compares with JSON values, not {value!r}") from exc
        return _Compare(self.path, op, value)

    def __gt__(self, value: Any) -> Condition:
        return self._compare(">", value)

    def __ge__(self, value: Any) -> Condition:
        return self._compare(">=", value)

    def __lt__(self, value: Any) -> Condition:
        return self._compare("<", value)

    def __le__(self, value: Any) -> Condition:
        return self._compare("<=", value)

    def is_(self, value: Any) -> Condition:
        """Equal to ``value`` (``==`` stays Python's equality of two ``Arg``)."""
        return self._compare("==", value)

    def is_not(self, value: Any) -> Condition:
        return self._compare("!=", value)

    def one_of(self, values: Sequence[Any]) -> Condition:
        return self._compare("in", list(values))


def arg(path: str) -> Arg:
    """The argument ``path`` names (dots go into nested objects)."""
    parts = tuple(path.split("."))
    if not all(parts):
        raise ValueError(f"{path!r} names no argument")
    return Arg(parts)


def approval_reason(condition: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why a call with ``arguments`` needs approval under ``condition`` (a declaration's
    JSON form), or None when it does not. A condition that cannot be evaluated asks for
    approval, and its reason says why."""
    try:
        if not evaluate(condition, arguments):
            return None
    except ConditionError as exc:
        return f"the approval condition {describe(condition)} cannot be evaluated: {exc}"
    return f"the call meets the approval condition {describe(condition)}"


def evaluate(condition: Any, arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` meet ``condition``; ``ConditionError`` saying why not when it
    cannot tell."""
    if not isinstance(condition, dict) or len(condition.keys() & {"arg", "all", "any", "not"}) != 1:
        raise ConditionError(f"{condition!r} is not a condition")
    if "all" in condition:
        return all(evaluate(part, arguments) for part in _parts(condition["all"]))
    if "any" in condition:
        return any(evaluate(part, arguments) for part in _parts(condition["any"]))
    if "not" in condition:
        return not evaluate(condition["not"], arguments)
    path, op, expected = condition["arg"], condition.get("op"), condition.get("value")
    if op not in _OPS:
        raise ConditionError(f"unknown comparison {op!r}")
    return _compare(_lookup(arguments, path), op, expected, ".".join(map(str, path)))


def _parts(parts: Any) -> list[Any]:
    if not isinstance(parts, list) or not parts:
        raise ConditionError(f"{parts!r} is not a list of conditions")
    return parts


def _lookup(arguments: dict[str, Any], path: Any) -> Any:
    if not isinstance(path, list) or not path:
        raise ConditionError(f"{path!r} names no argument")
    value: Any = arguments
    for n, name in enumerate(path):
        if not isinstance(value, dict) or name not in value:
            raise ConditionError(f"the call has no argument {'.'.join(path[: n + 1])!r}")
        value = value[name]
    return value


def _compare(value: Any, op: str, expected: Any, name: str) -> bool:
    if op == "==":
        return bool(value == expected)
    if op == "!=":
        return bool(value != expected)
    if op == "in":
        if not isinstance(expected, list):
            raise ConditionError(f"'in' needs a list of values, not {expected!r}")
        return value in expected
    if not (_is_number(value) and _is_number(expected)) and not (
        isinstance(value, str) and isinstance(expected, str)
    ):
        raise ConditionError(f"{name} is {value!r}: it cannot be compared with {expected!r}")
    if op == "<":
        return bool(value < expected)
    if op == "<=":
        return bool(value <= expected)
    if op == ">":
        return bool(value > expected)
    return bool(value >= expected)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def describe(condition: Any) -> str:
    """The condition in words, as an approver reads it (``amount > 100``)."""
    if not isinstance(condition, dict):
        return repr(condition)
    if "all" in condition or "any" in condition:
        how = "all" if "all" in condition else "any"
        parts = condition[how] if isinstance(condition[how], list) else [condition[how]]
        joined = f" {'and' if how == 'all' else 'or'} ".join(describe(p) for p in parts)
        return f"({joined})"
    if "not" in condition:
        return f"not {describe(condition['not'])}"
    path = condition.get("arg")
    name = ".".join(map(str, path)) if isinstance(path, list) else repr(path)
    return f"{name} {condition.get('op')} {json.dumps(condition.get('value'))}"
