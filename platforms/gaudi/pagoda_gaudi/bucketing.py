"""Static-shape buckets for Gaudi: the batch sizes and token counts steps are padded to.

Gaudi compiles a graph per input shape, so a runner pads every step up to a bucket and
compiles (warms up) each bucket once. A `BucketRange` (min, step, max[, limit]) spans the
buckets of one dimension:

- linear: min, 2*min, 4*min ... while below `step`, then every multiple of `step` up to max;
- exponential: `limit` sizes spaced geometrically from min to max (default: doubling),
  each rounded up to a multiple of `step` (to a power of two below `step`).

min and max are always buckets. Configure with a `BucketConfig` or the environment:
PAGODA_GAUDI_BUCKETS_BATCH and PAGODA_GAUDI_BUCKETS_TOKENS ("min,step,max" or
"min,step,max,limit") and PAGODA_GAUDI_BUCKETS_STRATEGY ("exponential" or "linear").

`BucketPadding` applies them to the engine's steps (the platform's `StepPadding`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pagoda.platforms.step_padding import StepShape

ENV_PREFIX = "PAGODA_GAUDI_BUCKETS_"
STRATEGIES = ("exponential", "linear")


class BucketConfigError(ValueError):
    """The bucket configuration is invalid; the message lists every problem."""


@dataclass(frozen=True)
class BucketRange:
    min: int
    step: int
    max: int
    limit: int | None = None  # exponential only: how many buckets (None: doubling)

    def problems(self, what: str) -> list[str]:
        """What is wrong with this range, each naming `what` it is for."""
        found = [f"{what}: {name} must be >= 1, got {value}"
                 for name, value in (("min", self.min), ("step", self.step), ("max", self.max))
                 if value < 1]
        if self.max < self.min:
            found.append(f"{what}: max {self.max} is below min {self.min}")
        if self.limit is not None and self.limit < 2:
            found.append(f"{what}: limit must be >= 2 (min and max), got {self.limit}")
        return found

    def linear(self) -> list[int]:
        ramp = _doublings(self.min, min(self.step, self.max))
        first = math.ceil(max(self.min, self.step) / self.step) * self.step
        return sorted({*ramp, *range(first, self.max, self.step), self.min, self.max})

    def exponential(self) -> list[int]:
        if self.max == self.min:
            return [self.min]
        count = max(2, self.limit or math.ceil(math.log2(self.max / self.min)) + 1)
        ratio = (self.max / self.min) ** (1 / (count - 1))
        spaced = (_round_up(self.min * ratio**i, self.step) for i in range(1, count - 1))
        return sorted({self.min, *(v for v in spaced if v < self.max), self.max})


def _doublings(start: int, below: int) -> list[int]:
    values = []
    while start < below:
        values.append(start)
        start *= 2
    return values


def _round_up(value: float, step: int) -> int:
    """`value` rounded up to a multiple of `step`, or to a power of two below `step`."""
    exact = math.ceil(value - 1e-9)
    if exact < step:
        return 1 << (exact - 1).bit_length()
    return math.ceil(exact / step) * step


@dataclass(frozen=True)
class BucketConfig:
    batch_size: BucketRange = field(default_factory=lambda: BucketRange(1, 32, 256))
    """Sequences per step."""

    tokens: BucketRange = field(default_factory=lambda: BucketRange(128, 256, 8192))
    """Flattened tokens per step (prefill chunks and decodes together)."""

    strategy: str = "exponential"

    def validate(self) -> list[str]:
        """Every problem with this configuration; empty when it is usable."""
        found = self.batch_size.problems("batch size") + self.tokens.problems("tokens")
        if self.strategy not in STRATEGIES:
            found.append(f"strategy must be one of {', '.join(STRATEGIES)}, got "
                         f"{self.strategy!r}")
        if self.tokens.max < self.batch_size.max:
            found.append(f"tokens max {self.tokens.max} is below batch size max "
                         f"{self.batch_size.max} (a step of decodes has a token per sequence)")
        return found

    def buckets(self, dimension: BucketRange) -> list[int]:
        return dimension.linear() if self.strategy == "linear" else dimension.exponential()

    def pad(self, num_seqs: int, num_tokens: int) -> tuple[int, int]:
        """The (batch size, token count) bucket a step of this size runs at."""
        return (padded(num_seqs, self.buckets(self.batch_size)),
                padded(num_tokens, self.buckets(self.tokens)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BucketConfig:
        """The defaults overridden by PAGODA_GAUDI_BUCKETS_*; raises BucketConfigError."""
        env = os.environ if environ is None else environ
        defaults, problems = cls(), []
        ranges = {}
        for name, attr in (("BATCH", "batch_size"), ("TOKENS", "tokens")):
            raw = env.get(ENV_PREFIX + name)
            try:
                ranges[attr] = getattr(defaults, attr) if raw is None else _parse_range(raw)
            except ValueError:
                problems.append(f"{ENV_PREFIX}{name}={raw!r} must be MIN,STEP,MAX or "
                                "MIN,STEP,MAX,LIMIT (integers)")
        if not problems:
            config = cls(**ranges, strategy=env.get(ENV_PREFIX + "STRATEGY", defaults.strategy))
            problems = config.validate()
        if problems:
            raise BucketConfigError("invalid Gaudi buckets: " + "; ".join(problems))
        return config


def _parse_range(raw: str) -> BucketRange:
    values = [int(v) for v in raw.split(",")]
    if len(values) not in (3, 4):
        raise ValueError(raw)
    return BucketRange(*values)


def padded(value: int, buckets: list[int]) -> int:
    """The smallest bucket >= `value`; a value above the largest bucket is an error."""
    for bucket in buckets:
        if bucket >= value:
            return bucket
    raise ValueError(f"{value} exceeds the largest bucket {buckets[-1]}")


class BucketPadding:
    """Steps padded to the buckets: sequences to a batch-size bucket; tokens to a token
    bucket, except in a step of decodes only, whose tokens (one per sequence) pad like its
    sequences; block-table widths to a power of two (at most the engine's widest)."""

    def __init__(self, config: BucketConfig, limits: StepShape):
        self.batch = config.buckets(config.batch_size)
        self.tokens = config.buckets(config.tokens)
        too_large = [f"{what} {limit} exceeds the largest {what} bucket {buckets[-1]} "
                     f"({ENV_PREFIX}{env})"
                     for what, limit, buckets, env in (
                         ("batch size", limits.num_seqs, self.batch, "BATCH"),
                         ("tokens", limits.num_tokens, self.tokens, "TOKENS"))
                     if limit > buckets[-1]]
        if too_large:
            raise BucketConfigError("the engine's largest step does not fit the Gaudi buckets: "
                                    + "; ".join(too_large))
        self.max_blocks = limits.max_blocks
        self.row_buckets = sorted({*self.batch, *self.tokens})

    def pad(self, shape: StepShape) -> StepShape:
        seqs = padded(shape.num_seqs, self.batch)
        decodes_only = shape.num_tokens == shape.num_seqs
        tokens = seqs if decodes_only else padded(shape.num_tokens, self.tokens)
        blocks = max(shape.max_blocks, min(_next_power_of_two(shape.max_blocks),
                                           self.max_blocks))
        return StepShape(tokens, seqs, blocks)

    def rows(self, n: int) -> int:
        return padded(n, self.row_buckets)


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
