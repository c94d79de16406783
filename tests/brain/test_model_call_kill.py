"""A model call survives its Brain: a Brain SIGKILLed while the model generates leaves a
call the Brain that takes over re-attaches to, when the model runs it in the background
(OpenAI's Responses API), and sends again, under the same request id, when it cannot (chat
completions). Real Brain processes; the loopback model server's count of the generations
it started -- what a provider bills -- is the judge, and the session's view must say the
same."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.model_server import USAGE, ModelServer
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]

AGENTS = "tests.brain.resend_agents"
HOLD = 3.0
"""Seconds the model takes to generate an answer."""


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer(hold=HOLD)
    yield server
    server.close()


@pytest.mark.parametrize(
    ("provider", "paid"), [("openai-responses", 1), ("openai", 2)], ids=["reattached", "resent"]
)
async def test_a_brain_killed_mid_call_pays_once_with_re_attach_and_twice_without(
    brains: BrainHarness, model: ModelServer, provider: str, paid: int
) -> None:
    background = provider == "openai-responses"
    env = {
        "BRAINHANDS_MODEL_PROVIDER": provider,
        "BRAINHANDS_MODEL_BACKGROUND": "true",
        "BRAINHANDS_MODEL_BASE_URL": model.base_url,
        "BRAINHANDS_MODEL_NAME": "test-model",
        "BRAINHANDS_MODEL_POLL_INTERVAL": "0.2",
    }
    victim = brains.start_brain(tasks=None, agents=AGENTS, **env)
    async with brains.client() as client:
        await client.submit("s1", "Think it over.", agent="patient", request_id="r1")

        def generating() -> bool:
            # In the background: once the Brain waits on the response whose id it
            # committed (it looks at it); else once the request is out.
            return model.polls() > 0 if background else model.generations > 0

        await eventually(generating, within=60, what="the model generating")
        victim.kill()  # SIGKILL, the model still at work
        victim.wait()
        assert model.generations == 1 and model.made["resp_1"].now()["status"] != "completed"
        brains.start_brain(tasks=None, agents=AGENTS, **env)
        record = await client.wait("s1", "r1", timeout=60)

        assert record.status == "answered", record.error
        assert record.answer == {"text": "done", "turns": 1}
        assert model.generations == paid
        view = await client.session("s1")
        [entry] = [e for e in view.entries if e.kind == "model"]
    # The view says which: the call sent again, counted and charged, or attached to again.
    tokens = USAGE["input_tokens"] + USAGE["output_tokens"]
    assert view.usage["model_calls"] == paid and view.usage["resent"] == paid - 1
    assert view.usage["tokens"] == paid * tokens
    request = entry.body["request"]
    assert request["resent"] == paid - 1
    if background:
        assert (request["response_id"], request["reattached"]) == ("resp_1", 1)
    # Every sending of the request carried its one id.
    posts = [r for r in model.received if r.path in ("/v1/responses", "/v1/chat/completions")]
    assert [r.headers["idempotency-key"] for r in posts] == [request["id"]] * paid
