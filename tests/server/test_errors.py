"""Raw HTTP: bad requests get 4xx with an OpenAI-style error naming the field, every spec
field is either honoured or refused by name, API keys are enforced, nothing crashes."""

from __future__ import annotations

import httpx
import pytest

from pagoda_server.protocol.chat import ChatCompletionRequest
from pagoda_server.protocol.completions import CompletionRequest
from tests.server.conftest import API_KEY, MODEL
from tests.server.openai_spec import request_fields, validate

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "w5 w6"}], "max_tokens": 2}
COMPLETION = {"model": MODEL, "prompt": "w5 w6", "max_tokens": 2}


def _tool(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


TOOL = _tool({"type": "object", "properties": {"a": {"type": "integer"}}})


@pytest.fixture(scope="module")
def http(server) -> httpx.Client:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        yield client


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    validate("ErrorResponse", body)
    assert "Traceback" not in response.text
    return body["error"]


@pytest.mark.parametrize("model_cls, schema", [
    (CompletionRequest, "CreateCompletionRequest"),
    (ChatCompletionRequest, "CreateChatCompletionRequest"),
])
def test_every_spec_field_is_known(model_cls, schema):
    """Each request field of the spec is honoured or explicitly refused, never unknown."""
    assert request_fields(schema) <= set(model_cls.model_fields)


@pytest.mark.parametrize("path, body, param, words", [
    ("/v1/chat/completions", {**CHAT, "frobnicate": 1}, "frobnicate", "unknown field"),
    ("/v1/completions", {**COMPLETION, "max_token": 3}, "max_token", "unknown field"),
    ("/v1/chat/completions", {**CHAT, "tools": [TOOL], "tool_choice": {
        "type": "function", "function": {"name": "g"}}}, "tool_choice", "not among the tools"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": "required"}, "tool_choice", "needs tools"),
    ("/v1/chat/completions", {**CHAT, "tools": [TOOL, TOOL]}, "tools", "same name"),
    ("/v1/chat/completions", {**CHAT, "tools": [_tool({"type": "array"})]},
     "tools[0].function.parameters", "JSON schema of an object"),
    ("/v1/chat/completions", {**CHAT, "tools": [_tool({"type": "object", "properties": {
        "a": {"type": "nonsense"}}})], "tool_choice": "required"},
     "tools[0].function.parameters", "not a valid JSON schema"),
    ("/v1/chat/completions", {**CHAT, "tools": [_tool({"type": "object", "properties": {
        "a": {"type": "array", "uniqueItems": True}}})], "tool_choice": "required"},
     "tools[0].function.parameters", "cannot be enforced"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": {
        "name": "no spaces"}}]}, "tools[0].function.name", "pattern"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "tool", "content": "x"}]},
     "messages[0]", "needs tool_call_id"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]},
     "messages[0].tool_calls[0].function.arguments", "not valid JSON"),
    ("/v1/chat/completions", {**CHAT, "reasoning_effort": "high"}, "reasoning_effort",
     "no reasoning parser"),
    ("/v1/chat/completions", {**CHAT, "audio": {"voice": "x", "format": "wav"}}, "audio",
     "not supported"),
    ("/v1/chat/completions", {**CHAT, "modalities": ["text", "audio"]}, "modalities",
     "not supported"),
    ("/v1/chat/completions", {**CHAT, "prediction": {"type": "content", "content": "x"}},
     "prediction", "not supported"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, "response_format.json_schema",
     "not a valid JSON schema"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "uniqueItems": True}}}},
     "response_format.json_schema", "cannot be enforced"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema"}},
     "response_format", "json_schema is required"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "xml"}},
     "response_format.type", "json_schema"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_object"},
                              "structured_outputs": {"regex": "a"}},
     "structured_outputs", "set only one"),
    ("/v1/completions", {**COMPLETION, "structured_outputs": {"regex": "(a"}},
     "structured_outputs.regex", "not a valid regular expression"),
    ("/v1/completions", {**COMPLETION, "structured_outputs": {"grammar": "root ::= x"}},
     "structured_outputs.grammar", "not a valid EBNF grammar"),
    ("/v1/completions", {**COMPLETION, "structured_outputs": {}}, "structured_outputs",
     "exactly one"),
    ("/v1/completions", {**COMPLETION, "structured_outputs": {"choice": []}},
     "structured_outputs.choice", "non-empty list"),
    ("/v1/completions", {**COMPLETION, "structured_outputs": {"xml": "a"}},
     "structured_outputs.xml", "unknown field"),
    ("/v1/chat/completions", {**CHAT, "store": True}, "store", "not supported"),
    ("/v1/completions", {**COMPLETION, "suffix": "w9"}, "suffix", "not supported"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]},
     "messages[0].content", "text content only"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "function", "content": "x",
                                                    "name": "f"}]},
     "messages[0].role", "deprecated"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, "temperature", "number"),
    ("/v1/chat/completions", {**CHAT, "temperature": 3}, "temperature", "less than"),
    ("/v1/chat/completions", {**CHAT, "n": 0}, "n", "greater than"),
    ("/v1/chat/completions", {**CHAT, "top_p": 0}, "top_p", "top_p"),
    ("/v1/chat/completions", {**CHAT, "top_k": -3}, "top_k", "top_k"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, "max_tokens", "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 100000}, "max_tokens", "context length"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, None, "logprobs"),
    ("/v1/chat/completions", {**CHAT, "logit_bias": {"999": 1}}, "logit_bias", "vocabulary"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, "messages", "at least 1"),
    ("/v1/chat/completions", {"model": MODEL}, "messages", "required"),
    ("/v1/completions", {**COMPLETION, "prompt": " ".join(["w5"] * 600)}, "prompt",
     "context length"),
    ("/v1/completions", {**COMPLETION, "prompt": [1, "a"]}, "prompt", "expected one of"),
    ("/v1/completions", {**COMPLETION, "prompt": [7, 9999]}, "prompt", "out of range"),
    ("/v1/completions", {**COMPLETION, "echo": True, "logprobs": 1}, None, "echo"),
    ("/v1/completions", {**COMPLETION, "best_of": 3}, None, "best_of"),
    ("/v1/completions", {**COMPLETION, "logprobs": 9}, "logprobs", "less than"),
    ("/tokenize", {"prompt": "w5", "messages": []}, None, "exactly one"),
    ("/detokenize", {"tokens": [-1]}, "tokens", "out of range"),
])
def test_bad_requests_name_the_field(http, path, body, param, words):
    error = _error(http.post(path, json=body), 400)
    assert error["param"] == param
    assert words in error["message"]
    assert error["type"] == "invalid_request_error"


def test_bad_bodies(http):
    assert "not valid JSON" in _error(http.post("/v1/chat/completions", content=b"{nope",
                                                headers={"content-type": "application/json"}),
                                      400)["message"]
    assert "JSON object" in _error(http.post("/v1/completions", json=[1, 2]), 400)["message"]
    _error(http.get("/v1/nothing-here"), 404)
    _error(http.get("/v1/chat/completions"), 405)


def test_unknown_model_is_404(http):
    error = _error(http.post("/v1/chat/completions", json={**CHAT, "model": "gpt-9"}), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert http.post("/v1/chat/completions", json={**CHAT, "model": "tiny-alias"}).is_success
    _error(http.get("/v1/models/gpt-9"), 404)


def test_stream_errors_come_before_the_stream(http):
    response = http.post("/v1/chat/completions", json={**CHAT, "stream": True,
                                                       "max_tokens": 100000})
    assert "context length" in _error(response, 400)["message"]


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"seed": 2**80}, "seed", "signed 64-bit"),
    ({"seed": -(2**63) - 1}, "seed", "signed 64-bit"),
    ({"stop": [f"w{i}" for i in range(1000)]}, "stop", "1000 entries: at most 64"),
    ({"stop": ["w" * 5000]}, "stop", "5000 characters"),
    ({"logit_bias": {str(i): 1 for i in range(5000)}}, "logit_bias", "5000 entries"),
    ({"n": 1000}, "n", "128"),
    ({"stop_token_ids": list(range(2000))}, "stop_token_ids", "2000 entries"),
])
def test_limits_answer_400_naming_the_field(http, body, field, says):
    error = _error(http.post("/v1/completions", json={"model": MODEL, "prompt": "w5", **body}),
                   400)
    assert field in error["message"] and says in error["message"], error
    assert len(error["message"]) < 500  # the size, not the items


def test_the_extreme_seeds_are_served(http):
    for seed in (2**63 - 1, -(2**63)):
        response = http.post("/v1/completions", json={"model": MODEL, "prompt": "w5",
                                                      "max_tokens": 2, "seed": seed})
        assert response.is_success, response.text


@pytest.mark.parametrize("body", [
    {"prompt": None}, {"prompt": {"a": 1}}, {"prompt": "w5", "n": True},
    {"prompt": "w5", "stop": [1]}, {"prompt": "w5", "logit_bias": {"x": 1}},
    {"prompt": "w5", "stream_options": {"bogus": 1}}, {"prompt": "w5", "seed": 1.5},
    {"prompt": "w5", "max_tokens": -1}, {"prompt": "w5", "bad_words": [""]},
    {"prompt": "w5", "allowed_token_ids": []}, {"prompt": "w5", "min_tokens": 99,
                                                "max_tokens": 2},
    {"prompt": "\u0000\uffff" * 50}, {"prompt": [[]]}, {"prompt": ["", ""], "max_tokens": 2},
])
def test_nothing_a_client_sends_crashes_the_server(http, body):
    response = http.post("/v1/completions", json={"model": MODEL, **body})
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    assert http.get("/health").status_code == 200


def test_api_keys(server):
    url = f"{server.url}/v1/chat/completions"
    missing = httpx.post(url, json=CHAT)
    assert missing.status_code == 401 and "missing API key" in missing.json()["error"]["message"]
    wrong = httpx.post(url, json=CHAT, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    validate("ErrorResponse", wrong.json())
    assert httpx.post(url, json=CHAT, headers={"Authorization": f"Bearer {API_KEY}"}).is_success
    assert httpx.post(url, json=CHAT, headers={"x-api-key": "other-key"}).is_success
    for public in ("/health", "/version", "/metrics"):
        assert httpx.get(f"{server.url}{public}").status_code == 200
    assert httpx.get(f"{server.url}/v1/models").status_code == 401


def test_request_bodies_over_the_limit_answer_413_unread(http):
    """The default limit is 8 MiB: declared (Content-Length) or streamed in chunks, a larger
    body is refused before it is parsed; one under the limit is parsed as usual."""
    big = b'{"model": "%s", "prompt": "w5", "pad": "' % MODEL.encode() + b"x" * (9 * 2**20) + b'"}'
    error = _error(http.post("/v1/completions", content=big,
                             headers={"content-type": "application/json"}), 413)
    assert "max-request-body-bytes" in error["message"] and str(8 * 2**20) in error["message"]

    def chunks():
        for start in range(0, len(big), 2**20):
            yield big[start:start + 2**20]

    error = _error(http.post("/v1/completions", content=chunks(),
                             headers={"content-type": "application/json"}), 413)
    assert "more" in error["message"]
    under = b'{"model": "%s", "prompt": "w5", "pad": "' % MODEL.encode() + b"x" * 2**20 + b'"}'
    error = _error(http.post("/v1/completions", content=under,
                             headers={"content-type": "application/json"}), 400)
    assert error["param"] == "pad"  # parsed: an unknown field
    assert http.get("/health").status_code == 200


def test_prompts_times_samples_are_bounded(http):
    error = _error(http.post("/v1/completions", json={"model": MODEL, "prompt": ["w5"] * 600,
                                                      "n": 2, "max_tokens": 1}), 400)
    assert "prompt holds 600 prompts" in error["message"] and "at most 1024" in error["message"]
    assert len(error["message"]) < 300
