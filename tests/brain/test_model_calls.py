"""The pure rules of a durable model call (``brain.model_calls``): its stable id, what its
answer's entry records, what a call sent again costs, and a failed background response
asked again under the next attempt."""

from __future__ import annotations

from brainhands.brain.agent import Agent
from brainhands.brain.budget import Price, Usage, response_usage
from brainhands.brain.model_calls import request_id, request_record, retry
from brainhands.brain.models.base import ModelResponse, TokenCount, TransientModelError
from brainhands.brain.task import Fail, Sleep

ANSWER = ModelResponse(raw={}, text="done", tokens=TokenCount(input=60, output=40))


def test_a_request_keeps_its_id_until_it_fails_and_the_entry_records_it() -> None:
    assert request_id("t1", 0) == request_id("t1", 0) != request_id("t1", 1)
    assert request_id("t1", 0) != request_id("t2", 0)
    sent = {"request_id": request_id("t1", 0), "resent": 1}
    assert request_record(sent) == {"request": {"id": "model-t1/0", "resent": 1}}
    attached = {"request_id": "model-t1/0", "response_id": "resp_1", "reattached": 2}
    assert request_record(attached) == {
        "request": {"id": "model-t1/0", "resent": 0, "response_id": "resp_1", "reattached": 2}
    }
    assert request_record({"attempt": 0}) == {}  # made by a build before request ids


def test_a_call_sent_again_is_paid_again_as_the_answer_that_came() -> None:
    price = Price(input=2.0, output=10.0)
    once, twice = response_usage(ANSWER, price), response_usage(ANSWER, price, resent=1)
    assert (once.model_calls, once.resent, once.tokens) == (1, 0, 100)
    assert (twice.model_calls, twice.resent, twice.tokens) == (2, 1, 200)
    assert twice.cost == 2 * once.cost
    assert Usage.from_json(twice.to_json()) == twice  # carried in a task's state, and back
    unbilled = ModelResponse(raw={}, text="done")
    assert response_usage(unbilled, None, resent=2) == Usage(model_calls=3, resent=2)


def test_a_failed_background_response_is_asked_again_under_the_next_attempt() -> None:
    agent = Agent(name="a", system="s", model_attempts=3, retry_delay=0.5)
    state = {"attempt": 0, "request_id": "model-t1/0", "response_id": "resp_1"}
    again = retry(agent, state, TransientModelError("the response failed: server_error"))
    assert isinstance(again, Sleep) and again.then == "request" and again.seconds == 0.5
    assert "response_id" not in again.state and again.state["attempt"] == 1
    last = retry(agent, {**state, "attempt": 2}, TransientModelError("down", retry_after=9))
    assert isinstance(last, Fail) and last.error["reason"] == "model unavailable"
