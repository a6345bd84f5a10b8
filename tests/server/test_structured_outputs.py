"""Structured outputs through a live server on SmolLM2 with the official `openai` client:
JSON schemas, `chat.completions.parse` with a pydantic model, streaming, the
`structured_outputs` extension; every response matches the OpenAI spec."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.real_model.structured_schemas import SCHEMAS
from tests.server.openai_spec import COMPLETION_CHUNK, validate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(smollm2_server):
    with openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


def _chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def _json_schema_reply(client: openai.OpenAI, name: str) -> dict:
    question, schema = SCHEMAS[name]
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2-135m-instruct", messages=_chat(question), temperature=0, max_tokens=100,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name, "schema": schema, "strict": True}})
    return raw.http_response.json()


def test_json_schemas(client):
    names = sorted(SCHEMAS)
    with ThreadPoolExecutor(len(names)) as pool:  # at once: the server batches them
        bodies = list(pool.map(lambda name: _json_schema_reply(client, name), names))
    for name, body in zip(names, bodies):
        validate("CreateChatCompletionResponse", body)
        choice = body["choices"][0]
        assert choice["finish_reason"] == "stop", (name, choice)
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMAS[name][1])


class Weather(BaseModel):
    city: str = Field(max_length=20)
    temperature_c: float = Field(ge=-50, le=60)
    conditions: Literal["sunny", "cloudy", "rain", "snow"]


def test_parse_with_a_pydantic_model(client):
    completion = client.chat.completions.parse(
        model="smollm2-135m-instruct", messages=_chat("What is the weather in Rome?"),
        response_format=Weather, temperature=0, max_tokens=80)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Weather), completion.choices[0].message.content


def test_stream_reassembles_to_the_whole(client):
    question, schema = SCHEMAS["enum"]
    kwargs = dict(model="smollm2-135m-instruct", messages=_chat(question), temperature=0,
                  max_tokens=60, response_format={"type": "json_schema", "json_schema": {
                      "name": "color", "schema": schema}})
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.to_dict())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(whole), schema)


def test_json_object(client):
    reply = client.chat.completions.create(
        model="smollm2-135m-instruct", temperature=0, max_tokens=100,
        messages=_chat("Reply in JSON with a key 'answer': what is 2 + 2?"),
        response_format={"type": "json_object"})
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_completions_with_the_extension(client):
    prompt = "The capital of France is"
    raw = client.completions.with_raw_response.create(
        model="smollm2-135m-instruct", prompt=prompt, max_tokens=10, temperature=0,
        extra_body={"structured_outputs": {"choice": [" Paris", " London", " Rome"]}})
    body = raw.http_response.json()
    validate("CreateCompletionResponse", body)
    assert body["choices"][0]["text"] == " Paris"
    chunks = list(client.completions.create(
        model="smollm2-135m-instruct", prompt="My phone number is", max_tokens=20,
        temperature=1.0, seed=3, stream=True,
        extra_body={"structured_outputs": {"regex": r" [0-9]{3}-[0-9]{4}"}}))
    for chunk in chunks:
        validate(COMPLETION_CHUNK, chunk.to_dict())
    assert re.fullmatch(r" [0-9]{3}-[0-9]{4}", "".join(c.choices[0].text for c in chunks))
