"""A request as the scheduler sees it: token ids, progress and status."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagoda.engine.thinking import ThinkingBudget
    from pagoda.lora.request import LoRARequest
    from pagoda.pooling_params import PoolingParams
    from pagoda.sampling_params import SamplingParams
    from pagoda.structured.engine import RequestGrammar


PLACEHOLDER_TOKEN_ID = -1
"""Stands for a token sampled by a step whose result the host has not seen yet."""


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in (self.FINISHED_STOPPED, self.FINISHED_LENGTH, self.FINISHED_ABORTED)

    @property
    def finish_reason(self) -> str | None:
        """OpenAI-style finish reason ("stop", "length", "abort") once finished."""
        return self.value if self.finished else None


@dataclass(eq=False)
class Request:
    """One sequence being generated, or one prompt of a pooling model (its output is the
    pooled hidden states, computed when its prompt is). `n > 1` requests are fanned out
    into siblings that share their first sibling's prompt blocks (`fork_of`)."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams | None
    """None for a pooling request."""
    max_tokens: int
    """Output tokens allowed: the user's max_tokens capped by the context length (0 for a
    pooling request)."""
    eos_token_id: int | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    priority: int = 0
    fork_of: Request | None = None
    pooling_params: PoolingParams | None = None
    """Set for a pooling request (and then sampling_params is None)."""
    token_type_ids: list[int] | None = None
    """Per prompt token, its segment (a cross-encoder's text pair: 0 for the first text, 1
    for the second); None: all 0."""
    lora_request: LoRARequest | None = None
    """The LoRA adapter it runs with (None: the base model)."""

    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    """Positions whose KV is computed or being computed (the last may be in flight)."""
    num_inflight_tokens: int = 0
    """Tokens being sampled by a step whose result has not arrived yet (0 or 1)."""
    status: RequestStatus = RequestStatus.WAITING
    stop_reason: int | str | None = None
    num_cached_tokens: int = -1
    """Prompt tokens found in the prefix cache at first scheduling (-1: not yet scheduled)."""
    num_preemptions: int = 0
    block_hashes: list[bytes] = field(default_factory=list)
    grammar: RequestGrammar | None = None
    """The engine core's matcher of `sampling_params.structured_outputs`."""
    thinking: ThinkingBudget | None = None
    """The engine core's keeper of `sampling_params.thinking_budget`."""
    speculative: bool = False
    """Its decode steps verify draft tokens (speculative decoding is on and its parameters
    allow it, see `pagoda.spec.can_speculate`)."""
    draft_token_ids: list[int] = field(default_factory=list)
    """The drafts of the step scheduled for it (verified when its result comes)."""
    num_draft_tokens: int = 0
    """Drafts proposed for it so far."""
    num_accepted_tokens: int = 0
    """Of those, the ones accepted."""

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def needs_host_tokens(self) -> bool:
        """Whether sampling its next token needs its previous ones on the host (penalties,
        bad words; its drafts are proposed from them), so no step may be scheduled while one
        of its tokens is in flight. (A grammar's or a thinking budget's bitmask is not: it
        may come after the launch.)"""
        params = self.sampling_params
        return params is not None and (params.has_penalties or bool(params.bad_words_token_ids)
                                       or self.speculative)

    @property
    def forced_token(self) -> int | None:
        """The token its next one must be (its thinking budget is spent), if any."""
        return None if self.thinking is None else \
            self.thinking.forced_token(self.num_output_tokens)

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Whether every prompt position's logits are needed."""
        return self.sampling_params is not None and self.sampling_params.prompt_logprobs is not None

    @property
    def lora_id(self) -> int:
        """Its adapter's id; 0 for the base model."""
        return 0 if self.lora_request is None else self.lora_request.lora_int_id

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    def token_ids_between(self, start: int, end: int) -> list[int]:
        """Token ids at positions [start, end) of prompt + output; positions of tokens in
        flight are `PLACEHOLDER_TOKEN_ID` (the model runner fills them in on the device)."""
        if end > self.num_tokens:
            known = self.token_ids_between(start, self.num_tokens) if start < self.num_tokens else []
            return known + [PLACEHOLDER_TOKEN_ID] * (end - max(start, self.num_tokens))
        prompt_len = len(self.prompt_token_ids)
        if end <= prompt_len:
            return self.prompt_token_ids[start:end]
        if start >= prompt_len:
            return self.output_token_ids[start - prompt_len : end - prompt_len]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - prompt_len]
