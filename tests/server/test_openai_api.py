"""The official `openai` client against a real server: every response, and every streamed
chunk, must match the OpenAI spec's component schemas."""

from __future__ import annotations

import openai
import pytest

from tests.server.conftest import MODEL
from tests.server.openai_spec import COMPLETION_CHUNK, validate

GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}
PROMPT = "w5 w17 w99 w42"
CHAT = [{"role": "system", "content": "w8 w9"}, {"role": "user", "content": "w10 w11 w12"}]


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key,
                       max_retries=0) as client:
        yield client


def test_models(client):
    raw = client.models.with_raw_response.list()
    validate("ListModelsResponse", raw.http_response.json())
    assert [m.id for m in raw.parse()] == [MODEL, "tiny-alias"]
    assert client.models.retrieve("tiny-alias").id == "tiny-alias"


@pytest.mark.parametrize("prompt, count", [
    (PROMPT, 1), ([PROMPT, "w3 w4"], 2), ([5, 17, 99], 1), ([[5, 17], [99, 42, 7]], 2)])
def test_completion_prompt_forms(client, prompt, count):
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt=prompt, max_tokens=5, n=2, **GREEDY)
    body = raw.http_response.json()
    validate("CreateCompletionResponse", body)
    assert [c["index"] for c in body["choices"]] == list(range(2 * count))
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["choices"][0]["text"] == body["choices"][1]["text"]  # greedy: n identical
    assert body["usage"]["completion_tokens"] == 5 * 2 * count


def test_completion_logprobs_and_echo(client):
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, logprobs=3, **GREEDY)
    body = raw.http_response.json()
    validate("CreateCompletionResponse", body)
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 4
    assert all(1 <= len(top) <= 4 for top in logprobs["top_logprobs"])
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, echo=True,
                                       **GREEDY)
    assert echoed.choices[0].text == PROMPT + body["choices"][0]["text"]


def test_completion_stream_matches_the_whole(client):
    whole = client.completions.create(model=MODEL, prompt=[PROMPT, "w3"], max_tokens=6,
                                      **GREEDY)
    stream = client.completions.create(model=MODEL, prompt=[PROMPT, "w3"], max_tokens=6,
                                       stream=True, stream_options={"include_usage": True},
                                       **GREEDY)
    texts, finish, usage = ["", ""], [None, None], None
    for chunk in stream:
        validate(COMPLETION_CHUNK, chunk.to_dict())
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            finish[choice.index] = choice.finish_reason or finish[choice.index]
        usage = chunk.usage or usage
    assert texts == [c.text for c in whole.choices]
    assert finish == ["length", "length"]
    assert usage.completion_tokens == 12 and usage.prompt_tokens == 5


def test_chat_completion(client):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=CHAT, max_completion_tokens=5, logprobs=True, top_logprobs=2,
        **GREEDY)
    body = raw.http_response.json()
    validate("CreateChatCompletionResponse", body)
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    content = choice["logprobs"]["content"]
    assert len(content) == 5 and all(len(t["top_logprobs"]) == 2 for t in content)
    assert "".join(t["token"] for t in content).replace(" ", "") == \
        choice["message"]["content"].replace(" ", "")
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (6, 5, 11)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0


def test_chat_stream_matches_the_whole(client):
    whole = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=7, **GREEDY)
    stream = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=7, stream=True, logprobs=True,
        stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.to_dict())
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert sum(len(c.choices[0].logprobs.content) for c in chunks
               if c.choices and c.choices[0].logprobs) == 7
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7


def test_stop_strings_and_stop_token_ids(client):
    words = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6,
                                           **GREEDY).choices[0].message.content.split()
    stopped = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6,
                                             stop=[f" {words[2]} "], **GREEDY).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.message.content.split() == words[:2]
    by_id = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=6, temperature=0.0,
        extra_body={"stop_token_ids": [int(words[1][1:])]}).choices[0]
    assert by_id.finish_reason == "stop" and by_id.message.content.split() == words[:1]


def test_extra_sampling_fields(client):
    greedy = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, **GREEDY)
    top1 = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=6, temperature=1.0,
        extra_body={"top_k": 1, "min_p": 0.0, "repetition_penalty": 1.0, "ignore_eos": True,
                    "min_tokens": 2, "skip_special_tokens": True, "priority": 0})
    assert top1.choices[0].text == greedy.choices[0].text  # top_k=1 is greedy


def test_seed_makes_sampling_reproducible(client):
    def sample() -> list[str]:
        out = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, n=2,
                                             seed=1234, temperature=1.0)
        return [c.message.content for c in out.choices]

    first = sample()
    assert sample() == first


def test_harmless_spec_fields_are_accepted(client):
    out = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=2, n=1, stream=False, store=False,
        user="someone", metadata={"k": "v"}, service_tier="auto", parallel_tool_calls=False,
        response_format={"type": "text"}, safety_identifier="abc", prompt_cache_key="p")
    assert out.choices[0].message.content


def test_usage_reports_cached_prompt_tokens(client):
    prompt = " ".join(f"w{10 + i}" for i in range(40))
    first = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, **GREEDY)
    second = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, **GREEDY)
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == 40
    assert second.usage.prompt_tokens_details.cached_tokens >= 32
