"""Conformance inputs of `fused_moe`: routings with one token and many, odd sizes, experts
left idle, experts with more tokens than a kernel's tile, choices skipped (-1, as under
expert parallelism), both integer id dtypes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pagoda.testing.op_cases import OpCase

# (tokens, hidden, intermediate, experts, top_k, experts the router uses, skipped share,
# id dtype)
MOE_SHAPES = (
    (1, 32, 16, 4, 2, 4, 0.0, torch.int64),
    (5, 48, 24, 8, 2, 8, 0.0, torch.int32),
    (40, 64, 32, 4, 2, 4, 0.0, torch.int64),
    (13, 40, 20, 8, 3, 6, 0.25, torch.int32),
    (3, 16, 16, 2, 2, 2, 0.0, torch.int64),
    (75, 32, 16, 16, 4, 12, 0.1, torch.int32),
)


def routing(gen: torch.Generator, tokens: int, top_k: int, used: int, skipped: float,
            id_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights [T, K] float32, topk_ids [T, K]): distinct experts of the first
    `used` per token, positive weights, a `skipped` share of the choices -1."""
    ids = torch.stack([torch.randperm(used, generator=gen)[:top_k] for _ in range(tokens)])
    ids[torch.rand(tokens, top_k, generator=gen) < skipped] = -1
    weights = torch.rand(tokens, top_k, generator=gen) + 0.05
    return weights / weights.sum(dim=1, keepdim=True), ids.to(id_dtype)


def fused_moe_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    from pagoda.testing.op_cases import OpCase

    for tokens, hidden, inter, experts, top_k, used, skipped, id_dtype in MOE_SHAPES:
        weights, ids = routing(gen, tokens, top_k, used, skipped, id_dtype)
        args = {
            "hidden": torch.randn(tokens, hidden, generator=gen).to(dtype),
            "w13": (torch.randn(experts, 2 * inter, hidden, generator=gen)
                    * hidden**-0.5).to(dtype),
            "w2": (torch.randn(experts, hidden, inter, generator=gen) * inter**-0.5).to(dtype),
            "topk_weights": weights,
            "topk_ids": ids,
        }
        label = (f"T={tokens} H={hidden} I={inter} E={experts} K={top_k} used={used} "
                 f"skipped={skipped:g} ids={str(id_dtype).removeprefix('torch.')}")
        yield OpCase("fused_moe", label, args,
                     {"dtype": dtype, "num_experts": experts, "top_k": top_k,
                      "hidden_size": hidden, "intermediate_size": inter})
