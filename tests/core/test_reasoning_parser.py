"""Reasoning parsers: whole outputs split into reasoning and content, and streamed splits
that add up to the whole one however the text is cut."""

from __future__ import annotations

import pytest

from pagoda.reasoning import REASONING_PARSERS, reasoning_parser

QWEN3 = reasoning_parser("qwen3")
R1 = reasoning_parser("deepseek_r1")

# (parser, prompt's end, output, reasoning, content)
CASES = [
    (QWEN3, "<|im_start|>assistant\n", "<think>\nLet me add.\n2+2=4\n</think>\n\nIt is 4.",
     "Let me add.\n2+2=4", "It is 4."),
    # thinking disabled: the template closed an empty block in the prompt
    (QWEN3, "<|im_start|>assistant\n<think>\n\n</think>\n\n", "It is 4.\n", None, "It is 4.\n"),
    (QWEN3, "assistant\n", "<think>\nstill thinking when max_tokens hit",
     "still thinking when max_tokens hit", None),
    (QWEN3, "assistant\n", "<think>\n\n</think>\n\n", None, None),
    (QWEN3, "assistant\n", "  plain <think> later </think> text", None,
     "  plain <think> later </think> text"),
    (QWEN3, "assistant\n", "", None, None),
    (R1, "<｜Assistant｜><think>\n", "Okay, 2+2.\n</think>\n\nThe answer is 4.",
     "Okay, 2+2.", "The answer is 4."),
    (R1, "<｜Assistant｜><think>\n", "Hmm, a long thought, cut", "Hmm, a long thought, cut", None),
    (R1, "<｜Assistant｜><think>\n", "</think>\n\n4", None, "4"),
    (R1, "<｜Assistant｜><think>\n", "a</think>b</think>c", "a", "b</think>c"),
    (R1, "<｜Assistant｜>", "<think>\nx\n</think>y", "x", "y"),
    (R1, "<｜Assistant｜>", "No thinking here", None, "No thinking here"),
]


@pytest.mark.parametrize(("parser", "prompt", "text", "reasoning", "content"), CASES)
def test_split(parser, prompt, text, reasoning, content):
    in_reasoning = parser.starts_in_reasoning(prompt)
    assert parser.split(text, in_reasoning) == (reasoning, content)


def _streamed(parser, pieces: list[str], in_reasoning: bool) -> tuple[str | None, str | None]:
    stream = parser.stream(in_reasoning)
    reasoning, content = "", ""
    for i, piece in enumerate(pieces):
        r, c = stream.feed(piece, final=i == len(pieces) - 1)
        reasoning, content = reasoning + r, content + c
    return reasoning or None, content or None


STREAM_TEXTS = [case[2] for case in CASES] + [
    "<thinking is not a tag", " <thi", "<think>a </thin", "<think>a </thinkx b</think>  c ",
    "<think>\n\n", "\n\n<think>x</think>\n", "x </think>  \n y  ", "   ",
]


@pytest.mark.parametrize("text", STREAM_TEXTS)
@pytest.mark.parametrize("in_reasoning", [False, True])
def test_stream_adds_up_to_split_at_every_cut(text, in_reasoning):
    whole = QWEN3.split(text, in_reasoning)
    assert _streamed(QWEN3, list(text) + [""], in_reasoning) == whole  # one char a feed
    for cut in range(len(text) + 1):
        assert _streamed(QWEN3, [text[:cut], text[cut:]], in_reasoning) == whole, cut
        for cut2 in range(cut, len(text) + 1, 3):
            pieces = [text[:cut], text[cut:cut2], text[cut2:]]
            assert _streamed(QWEN3, pieces, in_reasoning) == whole, (cut, cut2)


def test_stream_holds_back_only_what_may_be_a_tag():
    stream = QWEN3.stream(False)
    assert stream.feed("<thi") == ("", "")
    assert stream.feed("nk>\nIdea") == ("Idea", "")
    assert stream.feed(" one </th") == (" one", "")
    assert stream.feed("ink>\n\nAns") == ("", "Ans")
    assert stream.feed("wer\n") == ("", "wer\n")
    content_only = R1.stream(False)
    assert content_only.feed("Hi") == ("", "Hi")


def test_starts_in_reasoning():
    assert R1.starts_in_reasoning("<｜User｜>hi<｜Assistant｜><think>\n")
    assert not QWEN3.starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not QWEN3.starts_in_reasoning("<|im_start|>assistant\n")


def test_unknown_parser_names_the_choices():
    assert sorted(REASONING_PARSERS) == ["deepseek_r1", "qwen3"]
    with pytest.raises(ValueError, match="deepseek_r1, qwen3"):
        reasoning_parser("granite")


def test_thinking_switch():
    assert QWEN3.thinking_kwargs(False) == {"enable_thinking": False}
    assert QWEN3.thinking_kwargs(True) == {"enable_thinking": True}
    assert R1.thinking_kwargs(True) == {}
    with pytest.raises(ValueError, match="deepseek_r1 models always think"):
        R1.thinking_kwargs(False)
