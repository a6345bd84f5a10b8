"""What the engine gives back: `LLM.generate`'s outputs (which the server streams), their
logprobs, a pooling model's embeddings and scores, and the engine's statistics."""

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
    """Times (arrival_time, first_token_time, last_token_time: time.monotonic()); with
    speculative decoding, spec_draft_tokens and spec_accepted_tokens (all completions
    together) once drafts were proposed for it."""


@dataclass
class PoolingRequestOutput:
    """What the engine computed for one request of a pooling model (one output, once
    finished): the embedding, or a cross-encoder's score."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    data: list[float] | None
    """The embedding, or [score]; None when the request was aborted."""
    finish_reason: str = "stop"
    """"stop", or "abort"."""
    num_cached_tokens: int = 0
    finished: bool = True


@dataclass
class EmbeddingOutput:
    embedding: list[float]


@dataclass
class EmbeddingRequestOutput:
    """One prompt's embedding (`LLM.embed`)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: EmbeddingOutput


@dataclass
class ScoringOutput:
    score: float


@dataclass
class ScoringRequestOutput:
    """One text pair's relevance score (`LLM.score`): a cross-encoder's output, or the
    cosine similarity of the two texts' embeddings."""

    request_id: str
    prompt_token_ids: list[int]
    """The tokens scored: the pair's, or both texts' one after the other (embeddings)."""
    outputs: ScoringOutput


@dataclass
class EngineStats:
    """A snapshot of the engine core, for metrics and logs."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    spec_draft_tokens: int = 0
    """Draft tokens proposed since start-up (speculative decoding)."""
    spec_accepted_tokens: int = 0
    """Of those, the ones accepted."""
