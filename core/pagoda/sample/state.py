"""SamplingState: what the sampler needs to know about one request, kept across steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.sampling_params import SamplingParams

GREEDY_DRAW = (0.0, 0, 1.0, 0.0)
"""`SamplingState.draw` of a greedy request: no draw, no truncation."""


def _int64(seed: int) -> int:
    """`seed` modulo 2**64, as a signed 64-bit value."""
    return (seed + 2**63) % 2**64 - 2**63


@dataclass(eq=False)
class SamplingState:
    """One request in the model runner; the runner appends each sampled token to
    `output_token_ids` (after a preemption it keeps them, so seeded draws replay).
    A seeded request's draw number n (its n-th output token) depends only on its seed
    and n. The parameters of the draw and the penalties are read once, at creation."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_id: int | None = None
    stop_token_ids_for_min_tokens: list[int] = field(init=False)
    """Masked to -inf while fewer than `params.min_tokens` tokens were output."""
    draw: tuple[float, int, float, float] = field(init=False)
    """(temperature, top_k, top_p, min_p); `GREEDY_DRAW` for a greedy request."""
    seed: int | None = field(init=False)
    """The seed of a random request that has one, as a signed 64-bit value."""
    penalties: tuple[float, float, float] | None = field(init=False)
    """(repetition, frequency, presence) when any changes the logits."""

    def __post_init__(self) -> None:
        p = self.params
        ids = list(p.stop_token_ids)
        if self.eos_token_id is not None and not p.ignore_eos:
            ids.append(self.eos_token_id)
        self.stop_token_ids_for_min_tokens = sorted(set(ids))
        self.draw = GREEDY_DRAW if p.is_greedy else (p.temperature, p.top_k, p.top_p, p.min_p)
        self.seed = None if p.is_greedy or p.seed is None else _int64(p.seed)
        self.penalties = ((p.repetition_penalty, p.frequency_penalty, p.presence_penalty)
                          if p.has_penalties else None)

    @property
    def below_min_tokens(self) -> bool:
        return len(self.output_token_ids) < self.params.min_tokens

    def banned_by_bad_words(self) -> list[int]:
        """Last tokens of the bad words whose other tokens end the output so far."""
        out = self.output_token_ids
        banned = []
        for word in self.params.bad_words_token_ids:
            prefix = word[:-1]
            if not prefix or (len(prefix) <= len(out) and out[len(out) - len(prefix):] == prefix):
                banned.append(word[-1])
        return banned
