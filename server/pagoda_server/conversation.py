"""Conversations into prompts, with the served model's chat template, tool-call format and
reasoning tags (resolved once, at start-up).

A template that renders tools itself gets them, and earlier calls and results, as the
field's templates expect them. A template that ignores tools (SmolLM2's) gets them from
the tool-call parser instead: a system prompt that describes the tools and the format,
earlier calls written in that format, and results as user turns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError

from pagoda.reasoning import ReasoningParser, reasoning_parser
from pagoda.structured import StructuredOutputsParams
from pagoda.tools import FunctionTool, ToolCall
from pagoda.tools.parsers import ToolParser, detect_tool_parser, tool_parser
from pagoda_server.config import ChatFormatConfig
from pagoda_server.errors import bad_request
from pagoda_server.replies import ReplyFormat


@dataclass
class Turn:
    """One message of a conversation, whichever API it came from."""

    role: str
    """system, user, assistant or tool."""
    content: str
    name: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    reasoning: str | None = None


@dataclass
class Prompt:
    token_ids: list[int]
    in_reasoning: bool
    """The prompt leaves a think block open: the output starts with thinking."""


_PROBE_TOOL = FunctionTool("pagoda_probe", "probe", {"type": "object", "properties": {}})


def _template_tool(tool: FunctionTool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters or
                                {"type": "object"}}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _arguments(call: ToolCall) -> Any:
    """A call's arguments as templates expect them: an object, not its JSON text."""
    return json.loads(call.arguments)


class ChatFormat:
    """The served model's conversation formats."""

    def __init__(self, tokenizer: Any, config: ChatFormatConfig):
        self.tokenizer = tokenizer
        self.reasoning: ReasoningParser | None = (
            reasoning_parser(config.reasoning_parser) if config.reasoning_parser else None)
        template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None
        self.template_renders_tools = template is not None and self._renders_tools()
        name = config.tool_call_parser
        if name == "auto":
            name = (detect_tool_parser(template) if self.template_renders_tools else None) \
                or "hermes"
        self.tools: ToolParser | None = None if name == "none" else tool_parser(name)
        self._special = {t.content for t in getattr(tokenizer, "added_tokens_decoder",
                                                    {}).values() if t.special}

    def _renders_tools(self) -> bool:
        probe = [{"role": "user", "content": "x"}]
        try:
            with_tools = self._render(probe, tools=[_template_tool(_PROBE_TOOL)])
            return with_tools != self._render(probe)
        except (TemplateError, ValueError, TypeError, KeyError, IndexError):
            return False

    def _render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)

    def describe(self) -> str:
        """For the start-up banner, e.g. "hermes (told in a system prompt); reasoning qwen3"."""
        if self.tools is None:
            text = "off"
        else:
            text = self.tools.name + ("" if self.template_renders_tools
                                      else " (told in a system prompt)")
        return text + (f"; reasoning {self.reasoning.name}" if self.reasoning else "")

    # Prompts

    def prompt(self, turns: list[Turn], tools: list[FunctionTool], *,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               template_kwargs: dict[str, Any] | None = None,
               thinking: bool | None = None) -> Prompt:
        """The conversation's prompt; 400 naming the field when it cannot be rendered.
        `thinking`: turn the model's thinking on or off (None: the template's default)."""
        if self.tokenizer.chat_template is None:
            raise bad_request("this model has no chat template; start the server with "
                              "--chat-template", "messages")
        if continue_final_message and turns[-1].role != "assistant":
            raise bad_request("continue_final_message needs a final assistant message",
                              "continue_final_message")
        uses_tools = bool(tools) or any(t.tool_calls or t.role == "tool" for t in turns)
        if uses_tools and self.tools is None:
            raise bad_request("tool calling is off on this server (--tool-call-parser none)",
                              "tools")
        kwargs = dict(template_kwargs or {})
        if thinking is not None:
            kwargs.update(self._thinking_kwargs(thinking))
        if uses_tools and not self.template_renders_tools:
            messages = self._told_messages(turns, tools)
        else:
            messages = [self._native(t, turns) for t in turns]
            if tools:
                kwargs["tools"] = [_template_tool(t) for t in tools]
        try:
            text = self._render(messages, add_generation_prompt=add_generation_prompt,
                                continue_final_message=continue_final_message, **kwargs)
        except (TemplateError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise bad_request(f"the chat template could not render these messages: {exc}",
                              "messages") from None
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        in_reasoning = self.reasoning is not None and self.reasoning.starts_in_reasoning(text)
        return Prompt(list(ids), in_reasoning)

    def _thinking_kwargs(self, thinking: bool) -> dict[str, Any]:
        if self.reasoning is None:
            raise bad_request("this server has no reasoning parser (--reasoning-parser): "
                              "the model's thinking cannot be switched", "reasoning_effort")
        try:
            return self.reasoning.thinking_kwargs(thinking)
        except ValueError as exc:
            raise bad_request(str(exc), "reasoning_effort") from None

    def thinking_budget(self, tokens: int, field_name: str) -> dict[str, Any]:
        """SamplingParams fields that end the thinking after `tokens` tokens."""
        if self.reasoning is None:
            raise bad_request("this server has no reasoning parser (--reasoning-parser): "
                              "it cannot tell the model's thinking from its answer", field_name)
        return {"thinking_budget": tokens, "thinking_end": self.reasoning.end}

    @staticmethod
    def _native(turn: Turn, turns: list[Turn]) -> dict[str, Any]:
        """A turn as the field's templates expect it (calls with object arguments, results
        with the call's id and name)."""
        message: dict[str, Any] = {"role": turn.role, "content": turn.content}
        if turn.name is not None:
            message["name"] = turn.name
        if turn.reasoning is not None:
            message["reasoning_content"] = turn.reasoning
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": _arguments(c)}}
                for c in turn.tool_calls]
        if turn.role == "tool":
            message["tool_call_id"] = turn.tool_call_id
            call = _call_of(turn.tool_call_id, turns)
            if call is not None:
                message.setdefault("name", call.name)
        return message

    def _told_messages(self, turns: list[Turn], tools: list[FunctionTool]) -> list[dict[str, Any]]:
        """The conversation for a template that ignores tools: the parser's system prompt,
        calls in its format, results as user turns (consecutive ones in one)."""
        assert self.tools is not None
        messages: list[dict[str, Any]] = []
        for i, turn in enumerate(turns):
            if turn.role == "tool":
                result = self.tools.render_result(turn.content, _call_of(turn.tool_call_id, turns))
                if i and turns[i - 1].role == "tool":
                    messages[-1]["content"] += "\n" + result
                else:
                    messages.append({"role": "user", "content": result})
                continue
            content = turn.content
            if turn.tool_calls:
                calls = self.tools.render_calls(turn.tool_calls)
                content = f"{content}\n{calls}" if content else calls
            messages.append({"role": turn.role, "content": content})
        if tools:
            prompt = self.tools.tools_system_prompt(tools)
            if messages[0]["role"] == "system":
                messages[0]["content"] = f"{messages[0]['content']}\n\n{prompt}"
            else:
                messages.insert(0, {"role": "system", "content": prompt})
        return messages

    # Replies

    def grammar(self, tools: list[FunctionTool], forced: FunctionTool | str | None,
                parallel_tool_calls: bool, in_reasoning: bool,
                response_format: StructuredOutputsParams | None,
                schema_field: str = "tools[{}].function.parameters"
                ) -> StructuredOutputsParams | None:
        """The grammar the reply must follow (a forced call, a response format after the
        thinking), checked by the grammar engine; 400 naming the field when it cannot be
        (`schema_field`: where tool i's schema is in the request)."""
        from pagoda.structured.check import check
        from pagoda.tools.grammar import output_grammar

        for i, tool in enumerate(tools):
            if tool.parameters is None:
                continue
            try:
                check(StructuredOutputsParams(json=tool.parameters))
            except ValueError as exc:
                field_name = schema_field.format(i)
                raise bad_request(str(exc).replace("structured_outputs.json", field_name),
                                  field_name) from None
        if not tools:
            forced = None
        try:
            params = output_grammar(
                tool_format=self.tools.grammar_format if self.tools and tools else None,
                tools=tools, tool_choice=forced, parallel_tool_calls=parallel_tool_calls,
                reasoning=self.reasoning, in_reasoning=in_reasoning,
                response_format=response_format)
            if params is not None and params is not response_format:
                check(params)
        except ValueError as exc:
            message = str(exc)
            named = re.match(r"([\w.\[\]]+)[: ]", message)
            raise bad_request(message, named.group(1) if named else "tools") from None
        return params

    def keeps_special_tokens(self, tools: bool) -> bool:
        """Whether a reply's text must keep special tokens: the tool-call or thinking
        markers the parsers read are special tokens of this tokenizer."""
        markers = list(self.tools.markers) if tools and self.tools else []
        if self.reasoning is not None:
            markers += [self.reasoning.start, self.reasoning.end]
        return any(m in self._special for m in markers)

    def replies(self, tools: bool, in_reasoning: bool) -> ReplyFormat:
        """How the outputs of a request that offered `tools` (or not) are read."""
        return ReplyFormat(self.reasoning, in_reasoning, self.tools if tools else None)


def _call_of(call_id: str | None, turns: list[Turn]) -> ToolCall | None:
    """The earlier call a tool result answers."""
    for turn in turns:
        for call in turn.tool_calls:
            if call.id == call_id:
                return call
    return None
