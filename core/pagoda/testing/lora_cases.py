"""Conformance inputs of `lora_shrink` and `lora_expand`: one token and up to several
tiles (`group_by_slot`'s) of one slot, odd sizes and ranks, tokens of no adapter (-1) among others, a step of none, both integer slot
dtypes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from pagoda.ops.lora_reference import group_by_slot

if TYPE_CHECKING:
    from pagoda.testing.op_cases import OpCase

# (tokens, in features, out features, slots, rank, share of tokens without an adapter,
# slot dtype)
LORA_SHAPES = (
    (1, 64, 48, 1, 8, 0.0, torch.int32),
    (5, 200, 37, 3, 16, 0.2, torch.int64),
    (33, 72, 130, 4, 24, 0.3, torch.int32),
    (40, 96, 64, 8, 16, 0.5, torch.int64),
    (3, 40, 24, 2, 4, 1.0, torch.int32),
    (150, 48, 40, 3, 8, 0.1, torch.int64),
    (300, 40, 24, 2, 4, 0.1, torch.int32),
)


def _slots(gen: torch.Generator, tokens: int, num_slots: int, none_share: float,
           dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """slots [T], and `order` and `tiles` of a buffer of T + 9 slots that starts with them
    (as a step's are: its buffer is as long as the longest step)."""
    slots = torch.randint(0, num_slots, (tokens,), generator=gen)
    slots[torch.rand(tokens, generator=gen) < none_share] = -1
    buffer = torch.cat((slots, torch.full((9,), -1))).numpy()
    order, tiles = group_by_slot(buffer, num_slots)
    return {"slots": slots.to(dtype), "order": torch.from_numpy(order),
            "tiles": torch.from_numpy(tiles)}


def _label(tokens: int, k_or_r: str, n: int, slots: int, rank: int, none: float) -> str:
    return f"T={tokens} {k_or_r} N={n} S={slots} R={rank} none={none}"


def lora_shrink_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    from pagoda.testing.op_cases import OpCase

    for tokens, k, _, num_slots, rank, none, slot_dtype in LORA_SHAPES:
        args = {"x": torch.randn(tokens, k, generator=gen).to(dtype),
                "a": (torch.randn(num_slots, rank, k, generator=gen) * k**-0.5).to(dtype),
                **_slots(gen, tokens, num_slots, none, slot_dtype)}
        yield OpCase("lora_shrink", _label(tokens, f"K={k}", rank, num_slots, rank, none),
                     args, {"dtype": dtype})


def lora_expand_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    from pagoda.testing.op_cases import OpCase

    for tokens, _, n, num_slots, rank, none, slot_dtype in LORA_SHAPES:
        args = {"y": torch.randn(tokens, n, generator=gen).to(dtype),
                "h": torch.randn(tokens, rank, generator=gen).to(dtype),
                "b": (torch.randn(num_slots, rank, n, generator=gen) * rank**-0.5).to(dtype),
                **_slots(gen, tokens, num_slots, none, slot_dtype)}
        yield OpCase("lora_expand", _label(tokens, f"R={rank}", n, num_slots, rank, none),
                     args, {"dtype": dtype})
