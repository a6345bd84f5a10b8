"""`--request-timeout`: a request still running past it is aborted in the engine (its
blocks freed) and answered 504 `request_timeout` (an error event ending a stream), while
shorter requests next to it finish as usual."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.metrics_text import scrape
from tests.server.openai_spec import validate
from tests.server.server_process import ServerProcess

TIMEOUT_S = 0.5
LONG = {"max_tokens": 480, "temperature": 0.0, "n": 4, "extra_body": {"ignore_eos": True}}
"""Four sequences of 480 tokens: 480 decode steps, over a second on the tiny model even on
a fast machine (CI's ran 4 + 4 + 1 of them in under 2 s, so 2 s was too short a limit);
a request of 3 tokens takes a few steps, some 10 ms alone and under 150 ms batched with
these on a slow one."""


@pytest.fixture(scope="module")
def timed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS,
                             "--request-timeout", str(TIMEOUT_S)],
                            tmp_path_factory.mktemp("timed") / "serve.log")
    yield process
    process.stop()


def _client(server: ServerProcess) -> openai.AsyncOpenAI:
    # No retries: a 504 is the answer under test, not something to try again.
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0,
                              timeout=60)


async def _long_completion(client: openai.AsyncOpenAI) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        await client.completions.create(model=MODEL, prompt="w5 w6", **LONG)
    return caught.value


async def _long_stream(client: openai.AsyncOpenAI) -> tuple[int, openai.APIError]:
    """The chunks a long chat stream sent before its error event, and the error."""
    chunks = 0
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "w5"}], stream=True, **LONG)
    with pytest.raises(openai.APIError) as caught:
        async for _ in stream:
            chunks += 1
    return chunks, caught.value


async def _long_message(server: ServerProcess) -> httpx.Response:
    """An Anthropic message of 480 tokens (no ignore_eos in this API: greedy, the seeded
    tiny model does not end this answer sooner), batched with the long requests above."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        return await http.post("/v1/messages", json={
            "model": MODEL, "max_tokens": 480, "temperature": 0.0,
            "messages": [{"role": "user", "content": "w5"}]})


async def _short(client: openai.AsyncOpenAI, i: int) -> str | None:
    await asyncio.sleep(0.1 * i)  # spread over the long requests' lives
    reply = await client.completions.create(model=MODEL, prompt=f"w{5 + i}", max_tokens=3,
                                            temperature=0.0)
    return reply.choices[0].finish_reason


async def _mixed(server: ServerProcess) -> tuple[list[object], float]:
    async with _client(server) as client:
        started = time.monotonic()
        results = await asyncio.gather(_long_completion(client), _long_stream(client),
                                       _long_message(server),
                                       *(_short(client, i) for i in range(6)))
        return results, time.monotonic() - started


def _drained(server: ServerProcess) -> dict[str, float]:
    """The metrics once the engine has no request running (the aborts reach the core
    after the answers reach the clients), within 10 s."""
    deadline = time.monotonic() + 10
    while True:
        metrics = scrape(server.url)
        if metrics["pagoda:num_requests_running"] == 0 or time.monotonic() > deadline:
            return metrics


def test_requests_past_the_timeout_are_aborted_and_answer_504(timed) -> None:
    (whole, (chunks, streamed), message, *shorts), elapsed = asyncio.run(_mixed(timed))

    assert whole.status_code == 504
    body = whole.response.json()
    validate("ErrorResponse", body)
    assert body["error"]["code"] == "request_timeout"
    assert f"{TIMEOUT_S:g} s" in body["error"]["message"]
    assert "request_timeout" in body["error"]["message"]
    assert chunks > 0  # the stream had started: the timeout ended it with an error event
    assert "request_timeout" in streamed.message
    assert message.status_code == 504, message.text
    assert message.json()["type"] == "error"
    assert message.json()["error"]["type"] == "timeout_error"
    assert "request_timeout" in message.json()["error"]["message"]
    assert elapsed < TIMEOUT_S + 4  # answered at the limit, not when generation would end
    assert set(shorts) <= {"length", "stop"}  # the requests within the limit were served

    metrics = _drained(timed)
    assert metrics["pagoda:num_requests_running"] == 0
    assert metrics["pagoda:num_requests_waiting"] == 0
    assert metrics["pagoda:kv_cache_usage_perc"] == 0
    assert metrics["pagoda:request_success_total{finished_reason=abort}"] >= 4 + 4 + 1
    assert metrics["pagoda:request_timeouts_total"] == 3
    assert "Traceback" not in timed.output()

