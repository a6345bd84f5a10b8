"""The grammar of a chat request's output (`output_grammar`): forced tool calls in each
format, response_format, and a reasoning model's thinking first. Each grammar is checked
on whole texts (xgrammar's tokenizer-free matcher): the canonical calls are accepted,
wrong names, arguments against the schema and free text are not."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from pagoda.reasoning import reasoning_parser
from pagoda.structured import StructuredOutputsParams
from pagoda.structured.check import check
from pagoda.tools import TOOL_PARSERS, ToolCall, tool_parser
from pagoda.tools.grammar import CALL_SYNTAX, output_grammar
from pagoda.tools.types import FunctionTool

WEATHER = FunctionTool("get_weather", parameters={
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
})
NOOP = FunctionTool("noop")  # no schema: any object
TOOLS = [WEATHER, NOOP]
PARIS = ("get_weather", {"city": "Paris", "days": 2})
EMPTY = ("noop", {})


def _calls(tool_format: str, *calls: tuple[str, object]) -> str:
    """Calls as the format's parser renders them (its canonical text)."""
    return tool_parser(tool_format).render_calls(
        [ToolCall(name, json.dumps(args)) for name, args in calls])


def _grammar(**request) -> StructuredOutputsParams | None:
    fields = {"tool_format": "hermes", "tools": TOOLS, "tool_choice": None,
              "parallel_tool_calls": True, "reasoning": None, "in_reasoning": False,
              "response_format": None} | request
    return output_grammar(**fields)


def _accepts(params: StructuredOutputsParams, text: str) -> bool:
    check(params)  # a valid grammar, every schema enforceable
    return _is_grammar_accept_string(xgr.Grammar.from_structural_tag(params.spec), text)


FORMATS = sorted(CALL_SYNTAX)


def test_every_tool_parser_has_a_call_grammar():
    assert sorted(TOOL_PARSERS) == FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
def test_required_parallel_calls(fmt):
    grammar = _grammar(tool_format=fmt, tool_choice="required")
    assert _accepts(grammar, _calls(fmt, PARIS))
    assert _accepts(grammar, _calls(fmt, EMPTY))
    assert _accepts(grammar, _calls(fmt, PARIS, EMPTY, ("get_weather", {"city": "Oslo"})))
    assert not _accepts(grammar, "")
    assert not _accepts(grammar, "Sure! " + _calls(fmt, PARIS))  # no free text first
    assert not _accepts(grammar, _calls(fmt, PARIS) + " done")
    assert not _accepts(grammar, _calls(fmt, ("get_time", {})))
    for bad in ({"city": 3}, {"days": 2}, {"city": "Rome", "days": 0},
                {"city": "Rome", "extra": 1}):
        assert not _accepts(grammar, _calls(fmt, ("get_weather", bad))), bad
    assert not _accepts(grammar, _calls(fmt, EMPTY).replace("{}", "[1]"))  # not an object


@pytest.mark.parametrize("fmt", FORMATS)
def test_required_single_call(fmt):
    grammar = _grammar(tool_format=fmt, tool_choice="required", parallel_tool_calls=False)
    assert _accepts(grammar, _calls(fmt, PARIS))
    assert _accepts(grammar, _calls(fmt, EMPTY))
    assert not _accepts(grammar, _calls(fmt, PARIS, EMPTY))


@pytest.mark.parametrize("fmt", FORMATS)
def test_named_tool(fmt):
    grammar = _grammar(tool_format=fmt, tool_choice=FunctionTool("get_weather"))
    assert _accepts(grammar, _calls(fmt, PARIS))
    assert not _accepts(grammar, _calls(fmt, EMPTY))
    assert not _accepts(grammar, _calls(fmt, PARIS, PARIS))  # exactly once
    assert not _accepts(grammar, _calls(fmt, ("get_weather", {"days": 3})))
    assert not _accepts(grammar, "The weather: " + _calls(fmt, PARIS))


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_without_parallel_calls_allows_at_most_one(fmt):
    grammar = _grammar(tool_format=fmt, tool_choice="auto", parallel_tool_calls=False)
    assert _accepts(grammar, "It is sunny in Paris.")
    assert _accepts(grammar, _calls(fmt, PARIS))
    assert _accepts(grammar, "Let me check. " + _calls(fmt, PARIS))
    assert not _accepts(grammar, _calls(fmt, PARIS, EMPTY))
    assert not _accepts(grammar, _calls(fmt, PARIS) + " More text.")
    assert not _accepts(grammar, _calls(fmt, ("get_weather", {"city": 3})))


def test_no_constraint_gives_no_grammar():
    json_format = StructuredOutputsParams(json={"type": "object"})
    for choice in (None, "none", "auto"):
        assert _grammar(tool_choice=choice) is None
        assert _grammar(tool_choice=choice, reasoning=reasoning_parser("qwen3")) is None
        assert _grammar(tool_choice=choice, tools=[], response_format=json_format) is json_format
    assert _grammar(tool_choice="none", response_format=json_format) is json_format
    assert _grammar(tool_format=None, response_format=json_format) is json_format


def test_reasoning_comes_before_the_constraint():
    call = _calls("hermes", PARIS)
    qwen3 = _grammar(tool_choice="required", reasoning=reasoning_parser("qwen3"))
    assert _accepts(qwen3, "<think>\nThe user wants weather.\n</think>\n\n" + call)
    assert _accepts(qwen3, "<think></think>" + call)
    assert _accepts(qwen3, call)  # the think block is optional
    assert not _accepts(qwen3, "thinking</think>\n\n" + call)
    assert not _accepts(qwen3, "<think>never closed" + call)
    opened = _grammar(tool_choice="required", reasoning=reasoning_parser("deepseek_r1"),
                      in_reasoning=True)
    assert _accepts(opened, "Let me call <tool_call> it.\n</think>\n\n" + call)
    assert _accepts(opened, "</think>" + call)
    assert not _accepts(opened, call)  # the prompt's block must close first
    assert not _accepts(opened, "x</think>\n\nSure. " + call)


def test_response_format_after_reasoning():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for fields in ({"json": schema}, {"json": json.dumps(schema)}, {"regex": r'\{"a": [0-9]+\}'},
                   {"grammar": 'root ::= "{\\"a\\": " [0-9]+ "}"'}, {"choice": ['{"a": 1}']},
                   {"structural_tag": {"type": "structural_tag", "format": {
                       "type": "json_schema", "json_schema": schema}}}):
        grammar = _grammar(tools=[], reasoning=reasoning_parser("qwen3"),
                           response_format=StructuredOutputsParams(**fields))
        assert _accepts(grammar, '<think>\nhm\n</think>\n\n{"a": 1}'), fields
        assert _accepts(grammar, '{"a": 1}'), fields
        assert not _accepts(grammar, '<think>hm</think>{"b": 1}'), fields
    any_object = _grammar(tools=[], reasoning=reasoning_parser("qwen3"), in_reasoning=True,
                          response_format=StructuredOutputsParams(json_object=True))
    assert _accepts(any_object, 'x</think>{"z": [1]}')
    assert not _accepts(any_object, 'x</think>[1]')


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_tools_with_response_format_give_calls_or_content(fmt):
    answer = StructuredOutputsParams(json={"type": "object", "required": ["answer"],
                                           "properties": {"answer": {"type": "string"}}})
    grammar = _grammar(tool_format=fmt, tool_choice="auto", response_format=answer)
    assert _accepts(grammar, _calls(fmt, PARIS, EMPTY))
    assert _accepts(grammar, '{"answer": "sunny"}')
    assert not _accepts(grammar, '{"other": "sunny"}')
    assert not _accepts(grammar, "It is sunny.")
    assert not _accepts(grammar, _calls(fmt, ("get_weather", {"city": 1})))


def test_a_forced_call_wins_over_response_format():
    grammar = _grammar(tool_choice="required", response_format=StructuredOutputsParams(
        json={"type": "object"}))
    assert _accepts(grammar, _calls("hermes", PARIS))
    assert not _accepts(grammar, '{"answer": 1}')


def test_tool_names_are_json_escaped():
    odd = FunctionTool('say "hi"', parameters={"type": "object"})
    grammar = _grammar(tools=[odd], tool_choice="required")
    assert _accepts(grammar, _calls("hermes", ('say "hi"', {})))


@pytest.mark.parametrize(("request_fields", "message"), [
    ({"tools": [NOOP, FunctionTool("f", parameters={"properties": {"x": {"not": {}}}})],
      "tool_choice": "required"},
     r"tools\[1\]\.function\.parameters uses .*/properties/x: not"),
    ({"tools": [FunctionTool("f", parameters={"type": "array", "uniqueItems": True})],
      "tool_choice": "auto", "response_format": StructuredOutputsParams(json_object=True)},
     r"tools\[0\]\.function\.parameters .*uniqueItems"),
    ({"tool_choice": FunctionTool("get_time")}, "tool_choice names the function 'get_time'"),
    ({"tool_choice": "required", "tools": []}, "tool_choice \"required\" needs"),
    ({"tool_choice": "required", "tool_format": None}, "no tool-call format"),
    ({"tool_choice": "required", "tool_format": "pythonic"}, "'pythonic' cannot be"),
    ({"tool_choice": "always"}, "tool_choice must be"),
])
def test_errors_name_the_field(request_fields, message):
    with pytest.raises(ValueError, match=message):
        _grammar(**request_fields)
