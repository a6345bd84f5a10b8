"""Forced tool calls on a tiny random model: at any temperature, every sampled output
follows `output_grammar`'s grammar token by token, and every finished one parses (with the
format's tool parser) as calls of the offered tools, arguments satisfying their schemas.

The char tokenizer (printable ASCII, newline, JSON pieces) spells each format's calls in
many ways; the outputs are decoded and replayed through a matcher here, independently of the
engine's."""

from __future__ import annotations

import json

import jsonschema
import pytest
import xgrammar as xgr
from transformers import AutoTokenizer

from pagoda import LLM, SamplingParams
from pagoda.tools import FunctionTool, tool_parser
from pagoda.tools.grammar import output_grammar
from tests.engine.tiny_models import (
    CHAR_TOKENS,
    VOCAB,
    make_checkpoint,
    save_char_tokenizer,
    tiny_configs,
)

EOS = 2
TOOLS = [
    FunctionTool("f", parameters={"type": "object", "additionalProperties": False,
                                  "properties": {"n": {"type": "integer", "minimum": 0,
                                                       "maximum": 9}},
                                  "required": ["n"]}),
    FunctionTool("g", parameters={"type": "object", "additionalProperties": False,
                                  "properties": {"ok": {"type": "boolean"}}}),
]
MAX_TOKENS = 64
FORMATS = ("hermes", "llama3_json", "mistral")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])
    save_char_tokenizer(path)
    return path


@pytest.fixture(scope="module")
def compiler(checkpoint):
    info = xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(checkpoint),
                                              vocab_size=VOCAB)
    return xgr.GrammarCompiler(info)


@pytest.fixture(scope="module")
def llm(checkpoint):
    return LLM(str(checkpoint), dtype="float32", device="cpu", num_kv_blocks=1024,
               block_size=4, async_scheduling=False)


CASES = [(fmt, choice) for fmt in FORMATS
         for choice in ("required", "required_single", "named")]


def test_sampled_calls_always_parse(llm, compiler):
    """All formats and choices in one batch, greedy and at temperature 1."""
    grammars, prompts, params = [], [], []
    for tool_format, choice in CASES:
        grammar = output_grammar(
            tool_format=tool_format, tools=TOOLS,
            tool_choice=TOOLS[1] if choice == "named" else "required",
            parallel_tool_calls=choice == "required", reasoning=None, in_reasoning=False,
            response_format=None)
        for seed in (None, 0, 1):
            grammars.append(grammar)
            params.append(SamplingParams(temperature=0.0 if seed is None else 1.0, seed=seed,
                                         max_tokens=MAX_TOKENS, structured_outputs=grammar))
            prompts.append({"prompt_token_ids": [5, 9, 40, 7 + len(prompts)]})
    outputs = llm.generate(prompts, params, use_tqdm=False)
    finished = {case: 0 for case in CASES}
    for i, out in enumerate(outputs):
        (tool_format, choice), grammar = CASES[i // 3], grammars[i]
        completion = out.outputs[0]
        tokens = completion.token_ids
        text = "".join(CHAR_TOKENS[t - 3] for t in tokens if t != EOS)
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(grammar.spec),
                                     override_stop_tokens=[EOS])
        assert all(matcher.accept_token(t) for t in tokens), text
        if completion.finish_reason == "length":
            assert len(tokens) == MAX_TOKENS
            continue
        assert tokens[-1] == EOS and matcher.is_terminated(), text
        finished[tool_format, choice] += 1
        extracted = tool_parser(tool_format).extract(text)
        calls = extracted.calls
        assert extracted.content is None and calls, text
        assert choice == "required" or len(calls) == 1, text
        for call in calls:
            assert choice != "named" or call.name == "g", text
            tool = next(t for t in TOOLS if t.name == call.name)
            jsonschema.validate(json.loads(call.arguments), tool.parameters)
    # a single call is short: most of those finish (parallel calls may go on to max_tokens)
    assert all(finished[case] >= 2 for case in CASES if case[1] != "required"), finished
