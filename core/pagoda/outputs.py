"""What `LLM.generate` returns (and the server streams)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.engine.scheduler_output import TokenLogprobs


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
