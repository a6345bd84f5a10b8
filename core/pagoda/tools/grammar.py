"""The grammar a chat request's output must follow: its forced tool calls, its
response_format, and the thinking a reasoning model does first.

Built as an xgrammar structural tag (`StructuredOutputsParams.structural_tag`) from
xgrammar's format classes. xgrammar's own model tags (`get_model_structural_tag`) are not
used: they let free text precede a required call and have no place for a response_format,
so each format's call syntax is written out here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pagoda.structured.check import unsupported_feature, xgrammar
from pagoda.structured.params import ANY_OBJECT, StructuredOutputsParams
from pagoda.tools.types import FunctionTool

if TYPE_CHECKING:
    from pagoda.reasoning import ReasoningParser

_WHITESPACE = r"[ \t\r\n]*"


@dataclass(frozen=True)
class CallSyntax:
    """How a format writes its calls: `prefix`, then each call as `begin` (with the name,
    as a JSON string, in place of `{name}`), the arguments object, `end`, the calls
    separated by `separator`, then `suffix`."""

    begin: str
    end: str
    separator: str
    trigger: str
    """What starts a call in free text (a prefix of `prefix` + `begin`)."""
    prefix: str = ""
    suffix: str = ""


CALL_SYNTAX = {
    "hermes": CallSyntax('<tool_call>\n{{"name": {name}, "arguments": ', "}\n</tool_call>", "\n",
                         trigger="<tool_call>"),
    "llama3_json": CallSyntax('{{"name": {name}, "parameters": ', "}", "; ",
                              trigger='{"name": '),
    "mistral": CallSyntax('{{"name": {name}, "arguments": ', "}", ", ", trigger="[TOOL_CALLS]",
                          prefix="[TOOL_CALLS][", suffix="]"),
}
"""The call syntax of each tool-call format (the tool parsers' format names)."""


def output_grammar(*, tool_format: str | None, tools: list[FunctionTool],
                   tool_choice: str | FunctionTool | None, parallel_tool_calls: bool,
                   reasoning: ReasoningParser | None, in_reasoning: bool,
                   response_format: StructuredOutputsParams | None
                   ) -> StructuredOutputsParams | None:
    """The grammar of a chat request's output, or None when nothing constrains it.

    `tool_choice`: None, "none" or "auto" (the tools add no constraint by themselves,
    except without `parallel_tool_calls`: then at most one call, which ends the output),
    "required" (one or more calls of any tool; exactly one unless `parallel_tool_calls`)
    or a FunctionTool (exactly one call of that tool). A required or forced call is the
    whole output: no text before it, the end of sequence after it. With a forced call the
    response_format is ignored: it shapes the content, and such an output has none. With
    "auto" tools and a response_format the output is either the call(s) or the formatted
    content (with no `tool_format` nothing parses calls, so it is the formatted content).

    `reasoning` (the request's reasoning parser): the constraint starts after the thinking,
    which is free text up to the parser's end tag when `in_reasoning` (the prompt opened
    the block), else an optional complete think block. Reasoning alone returns None, so an
    unconstrained request pays nothing per token; a response_format alone, without
    reasoning, comes back unchanged.

    Raises ValueError naming the request field: a tool schema the grammar cannot enforce
    (`tools[i].function.parameters`), a `tool_choice` naming no tool of `tools` or needing
    a call with no tools or no known `tool_format`.
    """
    calls = _forced_calls(tool_format, tools, tool_choice, parallel_tool_calls)
    may_call = tool_choice in (None, "auto") and bool(tools) and tool_format is not None
    if may_call and not parallel_tool_calls and response_format is None:
        calls = _at_most_one_call(tool_format, tools)
    if calls is None and response_format is None:
        return None
    if calls is None and reasoning is None and not may_call:
        return response_format
    st = xgrammar().structural_tag
    if calls is not None:
        body = calls
    else:
        assert response_format is not None
        body = _format_of(response_format)
        if may_call:
            body = st.OrFormat(elements=[
                _calls(tool_format, list(enumerate(tools)), parallel_tool_calls), body])
    if reasoning is not None:
        body = st.SequenceFormat(elements=[_thinking(reasoning, in_reasoning), body])
    tag = json.loads(st.StructuralTag(format=body).model_dump_json())
    return StructuredOutputsParams(structural_tag=tag)


def _forced_calls(tool_format: str | None, tools: list[FunctionTool],
                  tool_choice: str | FunctionTool | None, parallel: bool) -> Any:
    """The format of the calls `tool_choice` forces, or None when it forces none."""
    if tool_choice in (None, "none", "auto"):
        return None
    if isinstance(tool_choice, FunctionTool):
        chosen = [(i, tool) for i, tool in enumerate(tools) if tool.name == tool_choice.name]
        if not chosen:
            raise ValueError(f"tool_choice names the function {tool_choice.name!r}, which is "
                             "not in tools")
        return _calls(tool_format, chosen[:1], parallel=False)
    if tool_choice == "required":
        if not tools:
            raise ValueError('tool_choice "required" needs at least one tool in tools')
        return _calls(tool_format, list(enumerate(tools)), parallel)
    raise ValueError(f'tool_choice must be "none", "auto", "required" or a function, '
                     f"got {tool_choice!r}")


def _calls(tool_format: str | None, tools: list[tuple[int, FunctionTool]],
           parallel: bool) -> Any:
    """One call of one of `tools` (each with its index in the request's tools; several
    calls, separated, if `parallel`), and nothing else."""
    if tool_format is None:
        raise ValueError("tool_choice needs a tool call's grammar, but the model has no "
                         "tool-call format (start the server with a tool-call parser)")
    if tool_format not in CALL_SYNTAX:
        raise ValueError(f"tool format {tool_format!r} cannot be constrained by a grammar; "
                         f"known: {', '.join(sorted(CALL_SYNTAX))}")
    _check_schemas(tools)
    st = xgrammar().structural_tag
    syntax = CALL_SYNTAX[tool_format]
    tags = [st.TagFormat(begin=syntax.begin.format(name=json.dumps(tool.name)),
                         content=st.JSONSchemaFormat(
                             json_schema=tool.parameters or json.loads(ANY_OBJECT)),
                         end=syntax.end)
            for _, tool in tools]
    calls = tags[0] if len(tags) == 1 and not parallel else st.TagsWithSeparatorFormat(
        tags=tags, separator=syntax.separator, at_least_one=True, stop_after_first=not parallel)
    if not syntax.prefix and not syntax.suffix:
        return calls
    return st.SequenceFormat(elements=[st.ConstStringFormat(value=syntax.prefix), calls,
                                       st.ConstStringFormat(value=syntax.suffix)])


def _at_most_one_call(tool_format: str, tools: list[FunctionTool]) -> Any:
    """Free text with at most one call in it, which ends the output ("auto" tools without
    parallel calls)."""
    _check_schemas(list(enumerate(tools)))
    st = xgrammar().structural_tag
    syntax = CALL_SYNTAX[tool_format]
    tags = [st.TagFormat(begin=syntax.prefix + syntax.begin.format(name=json.dumps(tool.name)),
                         content=st.JSONSchemaFormat(
                             json_schema=tool.parameters or json.loads(ANY_OBJECT)),
                         end=syntax.end + syntax.suffix)
            for tool in tools]
    return st.TriggeredTagsFormat(triggers=[syntax.trigger], tags=tags, stop_after_first=True)


def _check_schemas(tools: list[tuple[int, FunctionTool]]) -> None:
    for i, tool in tools:
        reason = unsupported_feature(tool.parameters)
        if reason:
            raise ValueError(f"tools[{i}].function.parameters uses a JSON-schema feature that "
                             f"cannot be enforced: {reason}")


def _format_of(params: StructuredOutputsParams) -> Any:
    """A response_format's grammar as a structural-tag format."""
    st = xgrammar().structural_tag
    kind, spec = params.key
    if kind == "json":
        return st.JSONSchemaFormat(json_schema=json.loads(spec))
    if kind == "regex":
        return st.RegexFormat(pattern=spec)
    if kind == "grammar":
        return st.GrammarFormat(grammar=spec)
    return st.StructuralTag.model_validate_json(spec).format


def _thinking(parser: ReasoningParser, in_reasoning: bool) -> Any:
    """The thinking before the constrained part, and the whitespace after it."""
    st = xgrammar().structural_tag
    block = st.SequenceFormat(elements=[
        st.TagFormat(begin="" if in_reasoning else parser.start, content=st.AnyTextFormat(),
                     end=parser.end),
        st.RegexFormat(pattern=_WHITESPACE)])
    return block if in_reasoning else st.OptionalFormat(content=block)
