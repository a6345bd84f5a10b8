"""Sampling fields shared by /v1/completions and /v1/chat/completions."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from pagoda_server.protocol.common import RequestModel
from pagoda_server.protocol.structured import ResponseFormat, StructuredOutputsRequest

SAMPLING_FIELDS = (
    "n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens",
    "logit_bias", "allowed_token_ids", "bad_words", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens",
)
"""Request fields passed to `SamplingParams` under the same name when set."""


class StreamOptions(RequestModel):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None
    """Accepted; this server never adds obfuscation padding."""


class SamplingRequest(RequestModel):
    """The OpenAI sampling fields plus Pagoda's extras (vLLM-compatible names)."""

    model: str | None = None
    """Optional here: the served model when left out."""
    n: int | None = Field(None, ge=1, le=128)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    """Accepted, unused."""

    # Extras beyond the OpenAI API.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    priority: int | None = None
    structured_outputs: StructuredOutputsRequest | None = None
    """A grammar the output must follow (one of json, json_object, regex, choice, grammar)."""
    """Scheduling priority (lower first) when the server runs `--scheduling-policy priority`."""

    def sampling_kwargs(self) -> dict[str, Any]:
        """`SamplingParams` keyword arguments for the fields the client set."""
        return self.set_values(SAMPLING_FIELDS)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)
