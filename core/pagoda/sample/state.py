"""SamplingState: what the sampler needs to know about one request, kept across steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.sampling_params import SamplingParams

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def step_seed(seed: int, step: int) -> int:
    """The generator seed of a seeded request's draw number `step` (a 64-bit hash)."""
    return _splitmix64(_splitmix64(seed & _MASK64) ^ step)


@dataclass(eq=False)
class SamplingState:
    """One request in the model runner; the runner appends each sampled token to
    `output_token_ids` (after a preemption it keeps them, so seeded draws replay)."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_id: int | None = None
    stop_token_ids_for_min_tokens: list[int] = field(init=False)
    """Masked to -inf while fewer than `params.min_tokens` tokens were output."""

    def __post_init__(self) -> None:
        ids = list(self.params.stop_token_ids)
        if self.eos_token_id is not None and not self.params.ignore_eos:
            ids.append(self.eos_token_id)
        self.stop_token_ids_for_min_tokens = sorted(set(ids))

    @property
    def below_min_tokens(self) -> bool:
        return len(self.output_token_ids) < self.params.min_tokens

    @property
    def draw_seed(self) -> int | None:
        """Seed of this step's random draw for a seeded request, else None."""
        if self.params.seed is None:
            return None
        return step_seed(self.params.seed, len(self.output_token_ids))

    def banned_by_bad_words(self) -> list[int]:
        """Last tokens of the bad words whose other tokens end the output so far."""
        out = self.output_token_ids
        banned = []
        for word in self.params.bad_words_token_ids:
            prefix = word[:-1]
            if not prefix or (len(prefix) <= len(out) and out[len(out) - len(prefix):] == prefix):
                banned.append(word[-1])
        return banned
