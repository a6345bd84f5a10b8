"""Reasoning through a live server (`--reasoning-parser qwen3`) on a tiny random model whose
chat template opens a think block: the thinking goes to `reasoning_content` (OpenAI) and
thinking blocks (Anthropic), streamed too; a thinking budget ends it where HF transformers'
tokens are then continued; a grammar applies after the thinking; `reasoning_effort: none`
closes the block in the prompt. Expected tokens come from HF transformers."""

from __future__ import annotations

import re

import anthropic
import openai
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tests.engine.tiny_models import hf_greedy, make_checkpoint, tiny_configs
from tests.server.openai_spec import validate
from tests.server.server_process import ServerProcess

THINK, END = 254, 255
TEMPLATE = ("{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}"
            "{% if enable_thinking is defined and not enable_thinking %}<think> </think>"
            "{% else %}<think>{% endif %}{% endif %}")
PROMPT = [5, 6, THINK]
"""The prompt of the conversation "w5 w6"."""
MODEL = "thinker"


def _words(ids: list[int]) -> str:
    return " ".join(f"w{i}" for i in ids)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("thinker"), tiny_configs()["llama"])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, THINK)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", chat_template=TEMPLATE)
    tokenizer.add_tokens(["<think>", "</think>"])
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    process = ServerProcess([str(checkpoint), "--dtype", "float32", "--device", "cpu",
                             "--kv-cache-memory", "2MiB", "--served-model-name", MODEL,
                             "--reasoning-parser", "qwen3"],
                            tmp_path_factory.mktemp("thinker") / "serve.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        yield client


BUDGET, MAX_TOKENS = 4, 10
MESSAGES = [{"role": "user", "content": "w5 w6"}]


@pytest.fixture(scope="module")
def expected(checkpoint) -> tuple[str, str]:
    """HF's greedy thinking cut at the budget, then its continuation after the end."""
    (thinking,) = hf_greedy(checkpoint, [PROMPT], BUDGET)
    assert END not in thinking  # else the model ends its thinking itself: pick a prompt
    (answer,) = hf_greedy(checkpoint, [PROMPT + thinking + [END]], MAX_TOKENS - BUDGET - 1)
    assert 2 not in thinking + answer  # no eos: Anthropic requests cannot ignore it
    return _words(thinking), _words(answer)


def _chat(client, **kwargs):
    kwargs = dict(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=MAX_TOKENS,
                  extra_body={"thinking_budget": BUDGET, "ignore_eos": True}) | kwargs
    return client.chat.completions.create(**kwargs)


def test_thinking_goes_to_reasoning_content(client, expected):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=MAX_TOKENS,
        extra_body={"thinking_budget": BUDGET, "ignore_eos": True})
    body = raw.http_response.json()
    validate("CreateChatCompletionResponse", body)
    message = body["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == expected


def test_streamed_thinking_reassembles(client, expected):
    chunks = list(_chat(client, stream=True))
    reasoning = content = ""
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.to_dict())
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
    assert (reasoning, content) == expected


def test_the_grammar_applies_after_the_thinking(client, expected):
    reply = _chat(client, extra_body={"thinking_budget": BUDGET,
                                      "structured_outputs": {"regex": "(w1[0-9]){3}"}})
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == expected[0]  # thinking: unconstrained
    assert re.fullmatch(r"w1[0-9] w1[0-9] w1[0-9]", message.content), message.content
    assert reply.choices[0].finish_reason == "stop"


def test_reasoning_effort_none_switches_thinking_off(client, checkpoint):
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0,
                                           max_tokens=5, reasoning_effort="none",
                                           extra_body={"ignore_eos": True})
    (answer,) = hf_greedy(checkpoint, [[5, 6, THINK, END]], 5)
    # (the word-level tokenizer puts a space before the first output word)
    assert reply.choices[0].message.content.lstrip() == _words(answer)
    assert reply.choices[0].message.model_extra.get("reasoning_content") is None


def test_anthropic_thinking_blocks(server, expected):
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    kwargs = dict(model=MODEL, max_tokens=MAX_TOKENS, messages=MESSAGES,
                  thinking={"type": "enabled", "budget_tokens": BUDGET},
                  extra_body={"temperature": 0.0})
    message = client.messages.create(**kwargs)
    thinking, text = message.content
    assert (thinking.type, thinking.thinking, text.type) == ("thinking", expected[0], "text")
    assert thinking.signature and text.text == expected[1]
    with client.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in message.content]
    hidden = client.messages.create(**{**kwargs, "thinking": {
        "type": "enabled", "budget_tokens": BUDGET, "display": "omitted"}})
    assert hidden.content[0].thinking == "" and hidden.content[1].text == expected[1]
