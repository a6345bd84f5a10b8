"""Tool calling through a live server on SmolLM2 with the official `openai` and `anthropic`
clients: forced and required calls whose arguments follow their schemas, a multi-turn
tool loop, streamed calls that reassemble to the whole; every OpenAI response matches the
OpenAI spec.

SmolLM2's chat template does not render tools, so the server tells the model about them
in a system prompt, in the Hermes format (`--tool-call-parser auto`)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.server.openai_spec import validate

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}},
        "required": ["timezone"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [{"type": "function", "function": {"name": name, "description": description,
                                           "parameters": SCHEMAS[name]}}
         for name, description in (("get_weather", "The weather forecast for a city"),
                                   ("get_time", "The time now in a timezone"))]
QUESTION = [{"role": "user", "content": "What will the weather be in Paris this week?"}]
FORCE_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def client(smollm2_server):
    with openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


def _create(client: openai.OpenAI, **kwargs) -> dict:
    kwargs = {"model": MODEL, "messages": QUESTION, "tools": TOOLS, "temperature": 0,
              "max_tokens": 100} | kwargs
    body = client.chat.completions.with_raw_response.create(**kwargs).http_response.json()
    validate("CreateChatCompletionResponse", body)
    return body


def _valid_calls(message: dict) -> list[dict]:
    calls = message["tool_calls"]
    for call in calls:
        assert call["type"] == "function" and call["id"]
        jsonschema.validate(json.loads(call["function"]["arguments"]),
                            SCHEMAS[call["function"]["name"]])
    return calls


def test_a_named_tool_is_called_with_valid_arguments(client):
    choice = _create(client, tool_choice=FORCE_WEATHER)["choices"][0]
    (call,) = _valid_calls(choice["message"])
    assert call["function"]["name"] == "get_weather"
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None


@pytest.mark.parametrize("parallel", [True, False])
def test_required_calls_some_tool(client, parallel):
    seeds = range(4)
    with ThreadPoolExecutor(len(seeds)) as pool:  # sampled, so the calls vary
        bodies = list(pool.map(lambda seed: _create(
            client, tool_choice="required", parallel_tool_calls=parallel, temperature=1.0,
            seed=seed, max_tokens=200), seeds))
    for body in bodies:
        choice = body["choices"][0]
        if choice["finish_reason"] == "length":
            continue  # a call cut off by max_tokens: not a call
        calls = _valid_calls(choice["message"])
        assert len(calls) >= 1 and (parallel or len(calls) == 1)
        assert choice["finish_reason"] == "tool_calls"


def test_a_tool_loop(client, smollm2_server):
    first = _create(client, tool_choice=FORCE_WEATHER)["choices"][0]["message"]
    (call,) = first["tool_calls"]
    result = '{"forecast": "sunny", "high_c": 24}'
    messages = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": result}]
    answer = _create(client, messages=messages, tool_choice="none", max_tokens=30)
    message = answer["choices"][0]["message"]
    assert message["content"] and "tool_calls" not in message
    again = _create(client, messages=messages, tool_choice="auto")  # may call again
    for later in again["choices"][0]["message"].get("tool_calls", []):
        json.loads(later["function"]["arguments"])
    # The model saw its call and the result: the prompt holds both.
    tokens = httpx.post(f"{smollm2_server.url}/tokenize",
                        json={"messages": messages, "tools": TOOLS}).json()["tokens"]
    prompt = httpx.post(f"{smollm2_server.url}/detokenize", json={"tokens": tokens}).json()
    arguments = json.loads(call["function"]["arguments"])
    assert result in prompt["prompt"] and "get_weather" in prompt["prompt"]
    assert json.dumps(arguments["city"]) in prompt["prompt"]


def _reassembled(chunks) -> tuple[str, list[dict]]:
    content, calls = "", {}
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.to_dict())
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
                if piece.id:
                    assert call["id"] is None, "a call's id comes once"
                    call["id"] = piece.id
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("tool_choice", [FORCE_WEATHER, "required"])
def test_streamed_calls_reassemble_to_the_whole(client, tool_choice):
    kwargs = dict(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=tool_choice,
                  temperature=0, max_tokens=300)
    whole = client.chat.completions.create(**kwargs).choices[0].message
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    content, calls = _reassembled(chunks)
    assert content == (whole.content or "")
    assert [(c["name"], c["arguments"]) for c in calls] == \
        [(c.function.name, c.function.arguments) for c in whole.tool_calls]
    assert all(c["id"] for c in calls)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_anthropic_tool_use(smollm2_server):
    client = anthropic.Anthropic(base_url=smollm2_server.url, api_key="unused", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    kwargs = dict(model=MODEL, max_tokens=100, messages=QUESTION, tools=tools,
                  tool_choice={"type": "tool", "name": "get_weather"},
                  extra_body={"temperature": 0.0})
    message = client.messages.create(**kwargs)
    assert message.stop_reason == "tool_use"
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)
    with client.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert [(b.type, getattr(b, "input", None)) for b in streamed.content] == \
        [(b.type, getattr(b, "input", None)) for b in message.content]
    assert streamed.stop_reason == "tool_use"
    # The loop: the tool's result goes back in a user message.
    followup = client.messages.create(
        model=MODEL, max_tokens=30, extra_body={"temperature": 0.0}, tools=tools,
        messages=[*QUESTION, {"role": "assistant", "content": message.content},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": use.id,
                       "content": "sunny, 24 degrees"}]}])
    assert followup.content[0].type in ("text", "tool_use")
    assert followup.stop_reason in ("end_turn", "max_tokens", "tool_use")
