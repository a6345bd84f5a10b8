"""Response pieces /v1/completions and /v1/chat/completions share: usage and logprobs."""

from __future__ import annotations

from typing import Any

from pagoda.outputs import RequestOutput, TokenLogprobs

_MIN_LOGPROB = -9999.0
"""Stands in for -inf, which JSON cannot carry."""


def usage(finals: list[RequestOutput]) -> dict[str, Any]:
    prompt = sum(len(f.prompt_token_ids) for f in finals)
    completion = sum(len(c.token_ids) for f in finals for c in f.outputs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(f.num_cached_tokens for f in finals)},
    }


class TokenTexts:
    """Each token's own text, as logprobs report it (cached per token id)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.tokenizer.decode([token_id])
        return text


def _logprob(value: float) -> float:
    return max(value, _MIN_LOGPROB)


def chat_logprobs(entries: list[TokenLogprobs], texts: TokenTexts) -> dict[str, Any]:
    """`choices[i].logprobs` of a chat completion (chunk)."""
    content = []
    for entry in entries:
        top = []
        for token_id, logprob in zip(entry.token_ids[1:], entry.logprobs[1:]):
            text = texts(token_id)
            top.append({"token": text, "logprob": _logprob(logprob),
                        "bytes": list(text.encode())})
        text = texts(entry.token_ids[0])
        content.append({"token": text, "logprob": _logprob(entry.logprobs[0]),
                        "bytes": list(text.encode()), "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(entries: list[TokenLogprobs], texts: TokenTexts,
                        offset: int) -> dict[str, Any]:
    """`choices[i].logprobs` of a completion (chunk); offsets count from `offset`."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    text_offset: list[int] = []
    for entry in entries:
        text = texts(entry.token_ids[0])
        tokens.append(text)
        token_logprobs.append(_logprob(entry.logprobs[0]))
        top = {texts(t): _logprob(lp) for t, lp in zip(entry.token_ids[1:], entry.logprobs[1:])}
        top.setdefault(text, _logprob(entry.logprobs[0]))
        top_logprobs.append(top)
        text_offset.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
            "text_offset": text_offset}
