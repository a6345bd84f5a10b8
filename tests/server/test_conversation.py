"""`ChatFormat` with chat templates that render tools themselves (the field's way: tools in
the system turn, earlier calls with their arguments as objects, results by call id) and
with one that does not (the tools told in a system prompt by the parser); the format each
template calls tools in is detected; reasoning opens in the prompt or not."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

from pagoda.tools import FunctionTool, ToolCall
from pagoda_server.config import ChatFormatConfig
from pagoda_server.conversation import ChatFormat, Turn
from pagoda_server.errors import APIError

HERMES_TEMPLATE = """{%- if tools %}<|system|>You may call these functions:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<|user|><tool_response>{{ m.content }}</tool_response>
{% elif m.role == 'assistant' %}<|assistant|>{{ m.content }}
{%- for call in m.tool_calls or [] %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}
{% else %}<|{{ m.role }}|>{{ m.content }}
{% endif %}{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}<think></think>{% else %}<think>{% endif %}{% endif %}"""
"""Qwen-like: tools listed as JSON, calls in <tool_call> tags with object arguments (a
string would be written quoted), results in <tool_response>; a think block opened."""

PLAIN_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>{% endif %}")

WEATHER = FunctionTool("get_weather", "The weather in a city",
                       {"type": "object", "properties": {"city": {"type": "string"}}})
CALL = ToolCall("get_weather", '{"city": "Paris"}', "call_1")
CONVERSATION = [Turn("user", "Weather in Paris?"), Turn("assistant", "", tool_calls=[CALL]),
                Turn("tool", "sunny, 24", tool_call_id="call_1")]


def _tokenizer(template: str) -> PreTrainedTokenizerFast:
    """Byte-level, no merges: every text round-trips through its tokens."""
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    vocab["<|endoftext|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   chat_template=template)


def _text(chat: ChatFormat, turns: list[Turn], tools: list[FunctionTool], **kwargs) -> str:
    prompt = chat.prompt(turns, tools, **kwargs)
    return chat.tokenizer.decode(prompt.token_ids)


def test_a_template_that_renders_tools_gets_them_natively():
    chat = ChatFormat(_tokenizer(HERMES_TEMPLATE), ChatFormatConfig())
    assert chat.template_renders_tools and chat.tools is not None
    assert chat.tools.name == "hermes"  # detected from the template
    text = _text(chat, CONVERSATION, [WEATHER])
    assert '"name": "get_weather"' in text and '"description": "The weather in a city"' in text
    assert '"arguments": {"city": "Paris"}' in text  # an object, not a quoted string
    assert "<tool_response>sunny, 24</tool_response>" in text
    assert text.endswith("<|assistant|><think>")


def test_a_template_that_ignores_tools_is_told_them_by_the_parser():
    chat = ChatFormat(_tokenizer(PLAIN_TEMPLATE), ChatFormatConfig())
    assert not chat.template_renders_tools and chat.tools.name == "hermes"
    text = _text(chat, CONVERSATION, [WEATHER])
    assert text.startswith("<|system|>") and '"get_weather"' in text.split("<|user|>")[0]
    rendered_call = chat.tools.render_calls([CALL])
    assert f"<|assistant|>{rendered_call}\n" in text
    assert chat.tools.extract(rendered_call).calls[0].arguments == CALL.arguments
    assert f"<|user|>{chat.tools.render_result('sunny, 24', CALL)}" in text
    assert json.loads(CALL.arguments)["city"] in text


def test_thinking_opens_in_the_prompt_and_can_be_switched_off():
    chat = ChatFormat(_tokenizer(HERMES_TEMPLATE),
                      ChatFormatConfig(reasoning_parser="qwen3"))
    turns = [Turn("user", "hi")]
    assert chat.prompt(turns, []).in_reasoning
    off = chat.prompt(turns, [], thinking=False)
    assert not off.in_reasoning
    assert chat.tokenizer.decode(off.token_ids).endswith("<think></think>")


def test_tools_off_and_no_reasoning_parser_are_400s():
    off = ChatFormat(_tokenizer(HERMES_TEMPLATE), ChatFormatConfig(tool_call_parser="none"))
    with pytest.raises(APIError, match="tool calling is off") as info:
        off.prompt(CONVERSATION, [])
    assert info.value.param == "tools"
    with pytest.raises(APIError, match="no reasoning parser") as info:
        off.prompt([Turn("user", "hi")], [], thinking=True)
    assert info.value.param == "reasoning_effort"
