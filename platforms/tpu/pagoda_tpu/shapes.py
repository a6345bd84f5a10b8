"""Static step shapes: bucketed token counts, sequence counts and block-table widths.

XLA compiles a program per distinct set of input shapes (0.4-1 s each on the CPU, much more
for a real model on a TPU), so every step is padded up to a bucket: powers of two from a
minimum up to the engine's limit (the limit itself is the last bucket). A step then costs a
compilation only the first time its (tokens, sequences, blocks) bucket is seen.

Settings come from the environment (validated here, without importing torch):

- PAGODA_TPU_MIN_TOKENS (16), PAGODA_TPU_MIN_SEQS (8), PAGODA_TPU_MIN_BLOCKS (8): the
  smallest bucket of each dimension, a power of two;
- PAGODA_TPU_CACHE_DIR: torch-xla's persistent compilation cache on TPUs (default
  ~/.cache/pagoda/xla); empty or "off" disables it. XLA's CPU device cannot load programs
  back, so it is not used there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pagoda.platforms.step_padding import StepShape

ENV_PREFIX = "PAGODA_TPU_"
CACHE_DIR_ENV = "PAGODA_TPU_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/pagoda/xla")


def next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def bucket(n: int, minimum: int, limit: int) -> int:
    """The padded size for `n`: the smallest power of two >= max(n, minimum), capped at
    `limit` (the engine never exceeds it); `n` itself past the limit, so nothing is cut."""
    if n > limit:
        return n
    return min(next_power_of_two(max(n, minimum)), limit)


def buckets(minimum: int, limit: int) -> list[int]:
    """Every size `bucket` returns for 1 <= n <= limit, smallest first."""
    sizes, size = [], minimum
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


@dataclass(frozen=True)
class StaticShapeConfig:
    """The smallest bucket of each padded dimension and the compilation cache folder."""

    min_tokens: int = 16
    min_seqs: int = 8
    min_blocks: int = 8
    cache_dir: Path | None = DEFAULT_CACHE_DIR

    def __post_init__(self) -> None:
        for name in ("min_tokens", "min_seqs", "min_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 \
                    or value & (value - 1):
                raise ValueError(f"{ENV_PREFIX}{name.upper()} must be a power of two >= 1, "
                                 f"got {value!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> StaticShapeConfig:
        sizes = {}
        for name in ("min_tokens", "min_seqs", "min_blocks"):
            raw = env.get(f"{ENV_PREFIX}{name.upper()}")
            if raw is None:
                continue
            try:
                sizes[name] = int(raw)
            except ValueError:
                raise ValueError(f"{ENV_PREFIX}{name.upper()} must be an integer, "
                                 f"got {raw!r}") from None
        raw_dir = env.get(CACHE_DIR_ENV)
        if raw_dir is None:
            cache_dir: Path | None = DEFAULT_CACHE_DIR
        elif raw_dir.strip().lower() in ("", "off"):
            cache_dir = None
        else:
            cache_dir = Path(raw_dir)
        return cls(**sizes, cache_dir=cache_dir.expanduser() if cache_dir else None)


@dataclass(frozen=True)
class StepShapes:
    """Bucket sizes for one engine: its config and its limits. The TPU platform's
    `StepPadding` (`pagoda.platforms.step_padding`): every dimension to its bucket."""

    config: StaticShapeConfig
    max_tokens: int  # max_num_batched_tokens
    max_seqs: int  # max_num_seqs
    max_blocks: int  # KV blocks a sequence can hold at most

    def pad(self, shape: StepShape) -> StepShape:
        return StepShape(self.tokens(shape.num_tokens), self.seqs(shape.num_seqs),
                         self.blocks(shape.max_blocks))

    def rows(self, n: int) -> int:
        return self.tokens(n)

    def tokens(self, n: int) -> int:
        return bucket(n, self.config.min_tokens, self.max_tokens)

    def seqs(self, n: int) -> int:
        return bucket(n, self.config.min_seqs, self.max_seqs)

    def blocks(self, n: int) -> int:
        return bucket(n, self.config.min_blocks, self.max_blocks)
