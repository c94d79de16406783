"""An approver's edit of a call's arguments, checked against the tool's declared schema
before anything is recorded (the pure check; the whole path is in tests/brain/test_reaching.py,
tests/api/test_api.py and tests/brainhands/test_cli.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from brainhands.client.approvals import check_arguments
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.tools import model_schema


class Payee(BaseModel):
    iban: str


class Payment(BaseModel):
    payee: Payee
    amount: int


SCHEMA = model_schema(Payment)  # what a Hands declares: its $defs and local $refs included


def test_an_edit_that_fits_the_declared_schema_passes() -> None:
    check_arguments("pay", SCHEMA, {"payee": {"iban": "FR76"}, "amount": 250})


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ({"payee": {"iban": "FR76"}}, 'arguments: "amount" is a required property'),
        ({"payee": {"iban": 7}, "amount": 1}, 'payee.iban: 7 is not of type "string"'),
        ({"payee": {}, "amount": "x"}, '"iban" is a required property; amount: "x" is not'),
    ],
)
def test_an_edit_that_does_not_fit_is_refused_naming_each_problem(
    edit: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidRequest, match="edited arguments of 'pay' are invalid") as refused:
        check_arguments("pay", SCHEMA, edit)
    assert problem in str(refused.value)


def test_a_schema_that_refers_elsewhere_is_never_fetched() -> None:
    """An MCP server writes its tools' schemas: the API never follows one off the machine."""
    remote = {"$ref": "http://127.0.0.1:9/schema.json"}
    with pytest.raises(InvalidRequest, match=r"cannot check an edit: .*Retrieval is disabled"):
        check_arguments("pay", remote, {"amount": 1})
