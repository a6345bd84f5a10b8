"""Front-end input handling: prompts to token ids, validation, `n` fan-out to Requests;
pooling requests checked against what the model's pooler does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagoda.engine.request import Request
from pagoda.inputs import PromptInput
from pagoda.lora.adapter import AdapterCheck
from pagoda.lora.request import LoRARequest
from pagoda.pooling import PoolerSpec
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

_POOLER_OUTPUTS = {"embed": "embeddings", "score": "relevance scores of text pairs"}


@dataclass
class ProcessedPrompt:
    prompt: str | None
    prompt_token_ids: list[int]
    token_type_ids: list[int] | None = None
    """A text pair's segments, for a cross-encoder."""


class InputProcessor:
    def __init__(self, tokenizer: Any, max_model_len: int, vocab_size: int,
                 eos_token_id: int | None, pooler: PoolerSpec | None = None,
                 check_adapter: AdapterCheck | None = None):
        """`pooler`: what the model outputs if it is a pooling model (None: it generates);
        `check_adapter`: refuses a request's LoRA adapter (None: LoRA is off)."""
        self.check_adapter = check_adapter
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.pooler = pooler

    def tokenize(self, prompt: PromptInput) -> ProcessedPrompt:
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                processed = self.tokenize(list(prompt["prompt_token_ids"]))
                if prompt.get("token_type_ids") is not None:
                    processed.token_type_ids = list(prompt["token_type_ids"])
                return processed
            if "prompt" in prompt:
                return self.tokenize(prompt["prompt"])
            raise ValueError("prompt dict needs 'prompt' or 'prompt_token_ids'")
        if isinstance(prompt, str):
            return ProcessedPrompt(prompt, self.tokenizer.encode(prompt))
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return ProcessedPrompt(None, list(prompt))
        raise TypeError(f"prompt must be text, a list of token ids or a dict, got {type(prompt)}")

    def tokenize_pair(self, text_1: str, text_2: str) -> ProcessedPrompt:
        """A text pair as a cross-encoder reads it: one sequence, with each token's segment."""
        encoded = self.tokenizer(text_1, text_2)
        return ProcessedPrompt(None, list(encoded["input_ids"]),
                               list(encoded["token_type_ids"]))

    def _check_tokens(self, ids: list[int]) -> None:
        if not ids:
            raise ValueError("prompt is empty: it must contain at least one token")
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"prompt token id {bad} is out of range [0, {self.vocab_size})")

    def validate(self, prompt: ProcessedPrompt, params: SamplingParams) -> int:
        """Check the prompt and params against the model; return the resolved max_tokens."""
        if self.pooler is not None:
            raise ValueError(f"this model is a pooling model ({_POOLER_OUTPUTS[self.pooler.task]}"
                             "): it does not generate text")
        if prompt.token_type_ids is not None:
            raise ValueError("token_type_ids are for pooling models (a cross-encoder's text "
                             "pair); this model generates text")
        ids = prompt.prompt_token_ids
        self._check_tokens(ids)
        params.validate_for_vocab(self.vocab_size)
        if params.structured_outputs is not None:
            from pagoda.structured.check import check  # the grammar engine, when asked for

            check(params.structured_outputs)
        room = self.max_model_len - len(ids)
        if room <= 0:
            raise ValueError(
                f"prompt is {len(ids)} tokens, but the model's context length (max_model_len) "
                f"is {self.max_model_len}: it leaves no room for output"
            )
        if params.max_tokens is None:
            return room
        if params.max_tokens > room:
            raise ValueError(
                f"max_tokens={params.max_tokens} plus the prompt's {len(ids)} tokens exceeds the "
                f"model's context length (max_model_len) of {self.max_model_len}"
            )
        return params.max_tokens

    def make_requests(self, request_id: str, prompt: ProcessedPrompt, params: SamplingParams,
                      priority: int = 0, arrival_time: float | None = None,
                      lora_request: LoRARequest | None = None) -> list[Request]:
        """One Request per completion; siblings of n > 1 share the first one's prompt blocks.
        `lora_request`: the adapter they run with (ValueError if it is refused)."""
        max_tokens = self.validate(prompt, params)
        if lora_request is not None:
            if self.check_adapter is None:
                raise ValueError("lora_request: LoRA is off (start the engine with enable_lora)")
            self.check_adapter(lora_request)
        if params.bad_words:
            params.encode_bad_words(self._encode_no_special)
        if params.thinking_budget is not None:
            params.encode_thinking_end(self._encode_no_special)
        requests: list[Request] = []
        for index in range(params.n):
            child_params = params  # shared read-only; a seeded sibling i draws with seed + i
            if params.seed is not None and index > 0:
                child_params = params.with_seed(params.seed + index)
            extra = {} if arrival_time is None else {"arrival_time": arrival_time}
            requests.append(Request(
                request_id=child_request_id(request_id, index, params.n),
                prompt_token_ids=prompt.prompt_token_ids,
                sampling_params=child_params,
                max_tokens=max_tokens,
                eos_token_id=self.eos_token_id,
                priority=priority,
                fork_of=requests[0] if requests else None,
                lora_request=lora_request,
                **extra,
            ))
        return requests

    def make_pooling_request(self, request_id: str, prompt: ProcessedPrompt,
                             params: PoolingParams, priority: int = 0,
                             arrival_time: float | None = None) -> Request:
        """The request of a pooling model's prompt; ValueError naming what does not fit."""
        if self.pooler is None:
            raise ValueError("this model generates text: it computes no embeddings or scores "
                             "(run a pooling model, or set runner to pooling)")
        self.pooler.check(params)
        ids = prompt.prompt_token_ids
        self._check_tokens(ids)
        if len(ids) > self.max_model_len:
            raise ValueError(f"prompt is {len(ids)} tokens, longer than the model's context "
                             f"length (max_model_len) of {self.max_model_len}")
        types = prompt.token_type_ids
        if types is not None:
            self.pooler.check_token_types(types)
            if len(types) != len(ids):
                raise ValueError(f"token_type_ids has {len(types)} entries for {len(ids)} "
                                 "prompt tokens")
        extra = {} if arrival_time is None else {"arrival_time": arrival_time}
        return Request(request_id=request_id, prompt_token_ids=ids, sampling_params=None,
                       max_tokens=0, priority=priority, pooling_params=params,
                       token_type_ids=types, **extra)

    def _encode_no_special(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


def child_request_id(request_id: str, index: int, n: int) -> str:
    return request_id if n == 1 else f"{request_id}#{index}"
