"""Split a reasoning model's output into its reasoning and its content, whole or streamed.

The thinking is a block between `start` and `end` tags at the beginning of the output,
or, when the chat template opened the block at the end of the prompt, everything up to
`end`. The tags and the whitespace right around them belong to neither part. A block
that never closes (thinking cut short by max_tokens) is all reasoning.
"""

from __future__ import annotations

from typing import ClassVar

_START, _REASONING_LEAD, _REASONING, _CONTENT_LEAD, _CONTENT = range(5)


class ReasoningParser:
    """The think-block convention of one family of models."""

    name: ClassVar[str]
    start: str = "<think>"
    end: str = "</think>"
    thinking_switch: ClassVar[str | None] = None
    """The chat template's keyword argument that turns thinking on or off; None: the
    model always thinks."""

    def thinking_kwargs(self, thinking: bool) -> dict[str, bool]:
        """The chat-template keyword arguments that turn the thinking on or off; ValueError
        when the model cannot do without it."""
        if self.thinking_switch is not None:
            return {self.thinking_switch: thinking}
        if not thinking:
            raise ValueError(f"{self.name} models always think: their thinking cannot be "
                             "turned off")
        return {}

    def starts_in_reasoning(self, prompt_text: str) -> bool:
        """The prompt leaves a think block open (the chat template put `start` at the end of
        the prompt), so the output begins inside the reasoning."""
        return prompt_text.rstrip().endswith(self.start)

    def split(self, text: str, in_reasoning: bool) -> tuple[str | None, str | None]:
        """(reasoning, content) of a whole output; None for an empty part. `in_reasoning`:
        `starts_in_reasoning` of the prompt."""
        if not in_reasoning:
            stripped = text.lstrip()
            if not stripped.startswith(self.start):
                return None, text or None
            text = stripped[len(self.start):]
        reasoning, closed, content = text.partition(self.end)
        reasoning = reasoning.lstrip()
        if closed:
            reasoning = reasoning.rstrip()
        return reasoning or None, content.lstrip() or None

    def stream(self, in_reasoning: bool) -> ReasoningStream:
        """A splitter of one output fed piece by piece."""
        return ReasoningStream(self, in_reasoning)


class ReasoningStream:
    """One streamed output's split: `feed` each new piece of text, get the reasoning and
    content it adds. Text that may yet turn out to be a tag (or whitespace around one) is
    held back until the next piece decides it, so the concatenated deltas equal `split` of
    the whole text."""

    def __init__(self, parser: ReasoningParser, in_reasoning: bool):
        self._parser = parser
        self._state = _REASONING_LEAD if in_reasoning else _START
        self._held = ""

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        """(reasoning delta, content delta) of the next piece; `final`: the output ended,
        release what is held."""
        start, end = self._parser.start, self._parser.end
        buf, self._held = self._held + text, ""
        reasoning, content = "", ""
        while buf:
            state = self._state
            if state == _START:
                stripped = buf.lstrip()
                if stripped.startswith(start):
                    buf, self._state = stripped[len(start):], _REASONING_LEAD
                elif final or not start.startswith(stripped):
                    self._state = _CONTENT
                else:  # whitespace, or a beginning of `start`: undecided
                    self._held = buf
                    break
            elif state in (_REASONING_LEAD, _CONTENT_LEAD):
                buf = buf.lstrip()
                if buf:
                    self._state += 1  # the part itself
            elif state == _REASONING:
                found = buf.find(end)
                if found >= 0:
                    reasoning += buf[:found].rstrip()
                    buf, self._state = buf[found + len(end):], _CONTENT_LEAD
                    continue
                keep = 0 if final else _partial_tag(buf, end)
                safe = buf[:len(buf) - keep]
                if not final:
                    safe = safe.rstrip()
                reasoning += safe
                self._held = buf[len(safe):]
                break
            else:
                content += buf
                break
        if final and self._state == _START:
            content += self._held
            self._held = ""
        return reasoning, content


def _partial_tag(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (and is shorter)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class Qwen3ReasoningParser(ReasoningParser):
    """Qwen3: the output opens with `<think>` and closes it before the answer; with
    thinking disabled the chat template puts an empty block in the prompt, and the whole
    output is content."""

    name = "qwen3"
    thinking_switch = "enable_thinking"


class DeepSeekR1ReasoningParser(ReasoningParser):
    """DeepSeek-R1: the chat template opens the block at the end of the prompt, so the
    output has only `</think>`; an output without it is all reasoning."""

    name = "deepseek_r1"


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    parser.name: parser for parser in (Qwen3ReasoningParser, DeepSeekR1ReasoningParser)
}
"""The reasoning parsers by name (the server's `--reasoning-parser`)."""


def reasoning_parser(name: str) -> ReasoningParser:
    """The parser called `name`; ValueError naming the choices otherwise."""
    if name not in REASONING_PARSERS:
        raise ValueError(f"unknown reasoning parser {name!r}; choose one of "
                         f"{', '.join(sorted(REASONING_PARSERS))}")
    return REASONING_PARSERS[name]()
