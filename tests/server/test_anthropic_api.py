"""The official `anthropic` client against a real server: Messages, streaming events,
stop sequences, prefill, token counting and Anthropic-style errors."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.server.conftest import MODEL

MESSAGES = [{"role": "user", "content": "w10 w11 w12"}]
GREEDY = {"extra_body": {"temperature": 0.0}}


@pytest.fixture(scope="module")
def client(server) -> anthropic.Anthropic:
    with anthropic.Anthropic(base_url=server.url, api_key=server.api_key,
                             max_retries=0) as client:
        yield client


def test_message(client):
    message = client.messages.create(model=MODEL, max_tokens=5, messages=MESSAGES,
                                     system="w8 w9", **GREEDY)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == MODEL and message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason in ("max_tokens", "end_turn")
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == 6
    assert usage.output_tokens == 5 or message.stop_reason == "end_turn"


def test_stream_matches_the_whole(client):
    whole = client.messages.create(model=MODEL, max_tokens=6, messages=MESSAGES, **GREEDY)
    with client.messages.stream(model=MODEL, max_tokens=6, messages=MESSAGES,
                                **GREEDY) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop",
            "message_delta"} <= set(events)
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequence_and_prefill(client):
    words = client.messages.create(model=MODEL, max_tokens=6, messages=MESSAGES,
                                   extra_body={"temperature": 0.0, "top_k": 1}
                                   ).content[0].text.split()
    assert len(words) >= 4  # the tiny model's greedy answer does not end early
    stop = f" {words[2]} "
    stopped = client.messages.create(model=MODEL, max_tokens=6, messages=MESSAGES,
                                     stop_sequences=[stop], **GREEDY)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert stopped.content[0].text.split() == words[:2]
    prefill = client.messages.create(
        model=MODEL, max_tokens=3, **GREEDY,
        messages=[*MESSAGES, {"role": "assistant", "content": "w3 " + words[0]}])
    assert prefill.content[0].text.split() == words[1:4]


def test_count_tokens(client):
    assert client.messages.count_tokens(model=MODEL, messages=MESSAGES,
                                        system="w8 w9").input_tokens == 6


def test_errors_are_anthropic_shaped(client, server):
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=5, messages=MESSAGES,
                               extra_body={"frobnicate": 1})
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "frobnicate" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="not among the tools"):
        client.messages.create(model=MODEL, max_tokens=5, messages=MESSAGES,
                               tools=[{"name": "t", "input_schema": {"type": "object"}}],
                               tool_choice={"type": "tool", "name": "u"})
    with pytest.raises(anthropic.BadRequestError, match="input_schema"):
        client.messages.create(model=MODEL, max_tokens=5, messages=MESSAGES,
                               tools=[{"type": "web_search_20250305", "name": "web_search"}])
    with pytest.raises(anthropic.BadRequestError, match="reasoning parser"):
        client.messages.create(model=MODEL, max_tokens=2000, messages=MESSAGES,
                               thinking={"type": "enabled", "budget_tokens": 1024})
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-x", max_tokens=5, messages=MESSAGES)
    response = httpx.post(f"{server.url}/v1/messages", json={"model": MODEL})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
