"""Random-token workloads: reproducible prompts of controlled lengths."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRequest:
    prompt_token_ids: list[int]
    output_len: int


def _length(rng: random.Random, mean: int, range_ratio: float) -> int:
    low = max(1, round(mean * (1 - range_ratio)))
    high = max(low, round(mean * (1 + range_ratio)))
    return rng.randint(low, high)


def random_requests(
    num_prompts: int,
    input_len: int,
    output_len: int,
    vocab_size: int,
    range_ratio: float = 0.0,
    seed: int = 0,
    special_token_ids: frozenset[int] = frozenset(),
) -> list[BenchRequest]:
    """Prompts of random token ids (no special tokens); lengths uniform in
    [len * (1 - range_ratio), len * (1 + range_ratio)]."""
    if not 0 <= range_ratio < 1:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    if input_len < 1 or output_len < 1 or num_prompts < 1:
        raise ValueError("input_len, output_len and num_prompts must be >= 1")
    rng = random.Random(seed)
    allowed = [t for t in range(vocab_size) if t not in special_token_ids]
    return [
        BenchRequest(
            [rng.choice(allowed) for _ in range(_length(rng, input_len, range_ratio))],
            _length(rng, output_len, range_ratio),
        )
        for _ in range(num_prompts)
    ]
