"""POST /v1/completions request body."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from pagoda_server.protocol.sampling import SamplingRequest

Prompt = str | list[int]
MAX_PROMPTS = 1024
"""Most prompts in one request (a list of texts or of token lists)."""


class CompletionRequest(SamplingRequest):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {"suffix": ("",)}

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16
    """Null: as many as the context allows."""
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool | None = None
    best_of: int | None = None
    """Accepted only when it equals `n`: the server returns every sample."""
    suffix: Any = None

    @model_validator(mode="after")
    def _check(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != (self.n or 1):
            raise ValueError("best_of is not supported unless it equals n")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo together with logprobs is not supported")
        if not self.prompt:
            raise ValueError("prompt must not be empty")
        if len(self.prompts()) * (self.n or 1) > MAX_PROMPTS:
            raise ValueError(f"prompt holds {len(self.prompts())} prompts of n = {self.n or 1} "
                             f"samples each: at most {MAX_PROMPTS} sequences a request")
        return self

    def prompts(self) -> list[Prompt]:
        """One entry per prompt: text or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str) or isinstance(prompt[0], int):
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]
