"""Approval conditions: built in Python, carried as JSON, decided by a pure function."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from brainhands.shared.conditions import approval_reason, arg, describe, evaluate
from brainhands.shared.tools import ToolDeclaration, declare

OVER_100 = (arg("amount") > 100).to_json()


def test_a_condition_is_json_and_reads_as_an_approver_reads_it() -> None:
    both = (arg("amount") >= 100) & ~arg("payee.country").one_of(["FR", "DE"])
    assert both.to_json() == {
        "all": [
            {"arg": ["amount"], "op": ">=", "value": 100},
            {"not": {"arg": ["payee", "country"], "op": "in", "value": ["FR", "DE"]}},
        ]
    }
    assert repr(both) == '(amount >= 100 and not payee.country in ["FR", "DE"])'
    assert describe((arg("to").is_("ceo@example.com") | (arg("n") < 2)).to_json()) == (
        '(to == "ceo@example.com" or n < 2)'
    )
    with pytest.raises(TypeError, match="JSON values"):
        arg("amount") > object()  # noqa: B015 -- the comparison is what raises
    with pytest.raises(ValueError, match="names no argument"):
        arg("payee.")


@pytest.mark.parametrize(
    ("arguments", "needs"),
    [({"amount": 100}, False), ({"amount": 100.5}, True), ({"amount": 5000}, True)],
)
def test_a_call_over_the_threshold_needs_approval_one_under_it_does_not(
    arguments: dict[str, Any], needs: bool
) -> None:
    reason = approval_reason(OVER_100, arguments)
    assert (reason is not None) == needs
    if needs:
        assert reason == "the call meets the approval condition amount > 100"


def test_combinations_and_nested_arguments() -> None:
    condition = (arg("amount") > 100) | arg("payee.country").is_not("FR")
    assert evaluate(condition.to_json(), {"amount": 5, "payee": {"country": "FR"}}) is False
    assert evaluate(condition.to_json(), {"amount": 5, "payee": {"country": "US"}}) is True
    assert evaluate((~(arg("amount") > 100)).to_json(), {"amount": 5}) is True
    assert evaluate(arg("to").one_of(["a", "b"]).to_json(), {"to": "b"}) is True
    assert evaluate((arg("to") < "m").to_json(), {"to": "ana"}) is True


@pytest.mark.parametrize(
    ("condition", "arguments", "why"),
    [
        (OVER_100, {}, "the call has no argument 'amount'"),
        (OVER_100, {"amount": "lots"}, "amount is 'lots': it cannot be compared with 100"),
        (OVER_100, {"amount": True}, "amount is True: it cannot be compared with 100"),
        ((arg("p.c") > 1).to_json(), {"p": 3}, "the call has no argument 'p.c'"),
        ({"arg": ["amount"], "op": "~=", "value": 1}, {"amount": 1}, "unknown comparison '~='"),
        ({"maybe": []}, {}, "is not a condition"),
        ({"all": []}, {}, "[] is not a list of conditions"),
    ],
)
def test_a_condition_that_cannot_be_evaluated_asks_for_approval_and_says_why(
    condition: dict[str, Any], arguments: dict[str, Any], why: str
) -> None:
    """Fail closed: a call the condition cannot judge is never let through unseen."""
    reason = approval_reason(condition, arguments)
    assert reason is not None
    assert "cannot be evaluated" in reason and why in reason
    # Deterministic: the same arguments, the same answer, every time it is asked.
    assert approval_reason(condition, arguments) == reason


class Payment(BaseModel):
    to: str
    amount: float


async def pay(args: Payment, ctx: Any) -> None:
    """Pay someone."""


def test_a_tool_declares_its_condition_and_the_declaration_decides() -> None:
    spec = declare(
        pay,
        name=None,
        pool="bank",
        policy="unsafe",
        query=None,
        timeout=5,
        retry=None,
        description=None,
        approval=arg("amount") > 100,
    )
    declared = spec.declaration()
    assert (declared.approval, declared.approval_when) == (False, OVER_100)
    assert declared.approval_reason({"to": "ana", "amount": 20}) is None
    assert declared.approval_reason({"to": "ana", "amount": 200}) is not None
    always = ToolDeclaration("pay", "bank", "unsafe", "", {}, approval=True)
    assert always.approval_reason({"amount": 1}) == (
        "the tool's declaration asks for approval of every call"
    )
    assert ToolDeclaration("pay", "bank", "unsafe", "", {}).approval_reason({}) is None
    # A condition changes the declaration's digest; a tool without one keeps its digest.
    assert declared.digest != ToolDeclaration(**{**declared.__dict__, "approval_when": None}).digest


def test_a_function_as_a_condition_is_refused_at_registration_saying_why() -> None:
    with pytest.raises(TypeError, match="the Brain decides it and never runs tool code"):
        declare(
            pay,
            name=None,
            pool="bank",
            policy="unsafe",
            query=None,
            timeout=5,
            retry=None,
            description=None,
            approval=lambda args: args.amount > 100,  # type: ignore[arg-type]
        )
