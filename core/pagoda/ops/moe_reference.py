"""The reference of the mixture-of-experts op (`fused_moe`): what every provider computes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_moe(
    hidden: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """The experts each token was routed to, weighted and summed:
    out[t] = sum over k of topk_weights[t, k] * w2[e] silu_and_mul(w13[e] hidden[t]), with
    e = topk_ids[t, k].

    hidden [T, H] in a float dtype; w13 [E, 2I, H] (each expert's gate rows, then its up
    rows) and w2 [E, H, I] in hidden's dtype; topk_weights [T, K] float32; topk_ids [T, K]
    int32 or int64, each in [0, E) or -1: a choice this call skips (under expert
    parallelism, an expert another rank holds). Each matmul gives hidden's dtype, as
    `linear` does, and the activation is `silu_and_mul`'s; the weighted sum is float32,
    rounded once to hidden's dtype.

    It runs every expert on every token and keeps the chosen rows: static shapes, no host
    synchronisation, any device, E times the arithmetic of a real kernel.
    """
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for expert in range(w13.shape[0]):
        chosen = topk_ids == expert
        weight = (topk_weights * chosen).sum(dim=1, keepdim=True)
        gate, up = F.linear(hidden, w13[expert]).float().chunk(2, dim=-1)
        y = F.linear((F.silu(gate) * up).to(hidden.dtype), w2[expert])
        out += torch.where(chosen.any(dim=1, keepdim=True), weight * y.float(), 0.0)
    return out.to(hidden.dtype)
