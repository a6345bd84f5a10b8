"""What the engine gives back: `LLM.generate`'s outputs (which the server streams), their
logprobs, and the engine's statistics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprobs:
    """Logprobs at one position: the chosen token first, then the top-k."""

    token_ids: list[int]
    logprobs: list[float]
    rank: int
    """Rank of the chosen token (1 = most likely)."""


@dataclass
class CompletionOutput:
    """One of a request's `n` completions, cumulative so far."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: list[TokenLogprobs] | None = None
    finish_reason: str | None = None
    """"stop", "length" or "abort" once finished."""
    stop_reason: int | str | None = None
    """The stop token id or stop string that ended it, if any."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    """Per prompt position; the first is None (nothing predicts it)."""
    num_cached_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class EngineStats:
    """A snapshot of the engine core, for metrics and logs."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
