"""What the scheduler tells the workers each step, and what comes back. Plain data, so it
can cross process boundaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pagoda.outputs import TokenLogprobs

if TYPE_CHECKING:
    from pagoda.lora.request import LoRARequest
    from pagoda.pooling_params import PoolingParams
    from pagoda.sampling_params import SamplingParams
    from pagoda.structured.engine import GrammarBitmask


@dataclass
class NewRequestData:
    """A request the workers have not seen, or one resuming after preemption."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    sampling_params: SamplingParams | None
    eos_token_id: int | None
    pooling_params: PoolingParams | None = None
    """Set for a pooling request (and then sampling_params is None)."""
    token_type_ids: list[int] | None = None
    lora_request: LoRARequest | None = None
    """The LoRA adapter it runs with, if any."""


@dataclass
class ScheduledRequest:
    """One request's share of a step."""

    request_id: str
    num_computed_tokens: int
    """Tokens already in the KV cache; this step's positions start here."""
    token_ids: list[int]
    """Tokens to compute this step."""
    block_ids: list[int]
    """The request's whole block table."""
    sample: bool
    """Whether this step reaches the request's last known token, so a new one is sampled
    (a pooling request: its prompt is computed, so its output is pooled)."""
    draft_token_ids: list[int] = field(default_factory=list)
    """Speculative tokens that end `token_ids`: the step samples at the position before
    each and after the last, and verifies them (`pagoda.spec.accepted_tokens`)."""


@dataclass
class SchedulerOutput:
    new_requests: list[NewRequestData] = field(default_factory=list)
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    finished_request_ids: list[str] = field(default_factory=list)
    """Requests finished, aborted or preempted since the last step: workers drop their state."""
    grammar_bitmask: GrammarBitmask | None = None
    """The allowed next tokens of the sampled requests that have a grammar (or a forced
    token)."""
    grammar_bitmask_later: bool = False
    """The bitmask comes after launch, by `Executor.provide_token_bitmask`, once the step
    in flight before this one has advanced the grammars; the runner issues the forward
    and samples when it comes."""

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class ModelRunnerOutput:
    """Per request that sampled this step: its new token (and logprobs); per pooling
    request whose prompt this step finished: its pooled output."""

    sampled: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, TokenLogprobs] = field(default_factory=dict)
    prompt_logprobs: dict[str, list[TokenLogprobs]] = field(default_factory=dict)
    """Logprobs of the prompt tokens computed this step (each chunk of a prefill)."""
    pooled: dict[str, list[float]] = field(default_factory=dict)
    verified: dict[str, list[int]] = field(default_factory=dict)
    """Per request that verified drafts: all its new tokens (the accepted drafts, then the
    token sampled after them); `sampled` holds the first."""

    def result(self) -> ModelRunnerOutput:
        """A finished output is its own result (see `StepResult`)."""
        return self


class StepResult(Protocol):
    """What executing a step returns: its output, possibly still being computed."""

    def result(self) -> ModelRunnerOutput:
        """Wait for the step's sampled tokens and return them."""


@dataclass
class EngineCoreOutput:
    """What the front end hears about one request after a step."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprobs] = field(default_factory=list)
    new_prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    pooled: list[float] | None = None
    """A pooling request's output (it comes with the request's finish)."""
    num_draft_tokens: int = 0
    """Draft tokens this step verified for it (speculative decoding)."""
    num_accepted_tokens: int = 0
    """Of those, the ones accepted (they are among `new_token_ids`)."""
