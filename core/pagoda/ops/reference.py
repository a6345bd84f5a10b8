"""Plain-PyTorch reference implementations: they define what each op means.

Every provider of an op must match these (see `pagoda.testing` conformance tests).
Shapes: T tokens, H query heads, K kv heads, D head size, B rows. Attention over the paged
KV cache is not an op: its reference is `pagoda.attention.reference`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pagoda.ops.lora_reference import lora_expand, lora_shrink
from pagoda.ops.moe_reference import fused_moe
from pagoda.ops.quant_reference import fp8_linear, int8_linear, woq_linear
from pagoda.quant.tensors import QuantizedActivation, quantize_per_token

__all__ = ["all_reduce", "apply_token_bitmask", "encoder_attention", "fp8_linear",
           "fused_add_rms_norm", "fused_add_rms_norm_quant", "fused_moe", "gelu",
           "gelu_and_mul", "int8_linear", "layer_norm", "linear", "lora_expand", "lora_shrink",
           "rms_norm", "rotary_embedding", "sample_from_logits", "silu_and_mul",
           "silu_and_mul_quant", "woq_linear"]

linear = F.linear
"""linear(x, weight, bias=None): x @ weight^T (+ bias) for x [..., K], weight [N, K] as
nn.Linear stores it and bias [N], all of one dtype; [..., N] in that dtype. torch's own
function rather than a wrapper, so that where the reference serves (the CPU) a dense layer
costs exactly what F.linear does."""


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight over the last dim, computed in float32, returned in x's dtype."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); the sum is rounded to x's dtype first."""
    summed = (x.float() + residual.float()).to(x.dtype)
    return rms_norm(summed, weight, eps), summed


def fused_add_rms_norm_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
    code_dtype: torch.dtype,
) -> tuple[QuantizedActivation, torch.Tensor]:
    """`fused_add_rms_norm` with its normed output (rounded to x's dtype) quantized per token
    to `code_dtype` (`quantize_per_token`): the input of a W8A8 linear, handed over
    quantized."""
    normed, summed = fused_add_rms_norm(x, residual, weight, eps)
    return quantize_per_token(normed, code_dtype), summed


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first `rot_dim` dims of each head of query [T, H, D] and key [T, K, D].

    cos_sin_cache is [max_positions, rot_dim]: cos in the first half, sin in the second.
    neox style rotates pairs (i, i + rot_dim/2); gptj style rotates pairs (2i, 2i + 1).
    """
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)  # [T, rot/2]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        rot_dim = cos.shape[-1] * 2
        xr, rest = x[..., :rot_dim].float(), x[..., rot_dim:]
        if is_neox:
            x1, x2 = xr.chunk(2, dim=-1)
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((out.to(x.dtype), rest), dim=-1)

    return rotate(query), rotate(key)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of last dim 2d."""
    gate, up = x.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(x.dtype)


def silu_and_mul_quant(x: torch.Tensor, code_dtype: torch.dtype) -> QuantizedActivation:
    """`silu_and_mul` (rounded to x's dtype) quantized per token to `code_dtype`."""
    return quantize_per_token(silu_and_mul(x), code_dtype)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(x[..., :d]) * x[..., d:]; `approximate` is "none" (erf) or "tanh"."""
    gate, up = x.float().chunk(2, dim=-1)
    return (F.gelu(gate, approximate=approximate) * up).to(x.dtype)


_U32 = 0xFFFFFFFF
_PHILOX_MUL = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEP = (0x9E3779B9, 0xBB67AE85)


def _high_word(x: torch.Tensor) -> torch.Tensor:
    """Bits 32..63 of int64 x as a non-negative word. Shifts only an exact multiple of
    2**32: some backends (torch-xla 2.9) round `>>` of negative numbers toward zero."""
    return ((x - (x & _U32)) >> 32) & _U32


def philox4x32(
    counter: tuple[torch.Tensor, ...], key: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 (Salmon et al., 2011): 32-bit words held in int64 tensors that
    broadcast together; four counter words and two key words in, four words out."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = c0 * _PHILOX_MUL[0]  # < 2**64: wraps in int64; the low 32 bits and the
        p1 = c2 * _PHILOX_MUL[1]  # high word taken from them are still exact
        c0, c1, c2, c3 = (
            _high_word(p1) ^ c1 ^ k0,
            p1 & _U32,
            _high_word(p0) ^ c3 ^ k1,
            p0 & _U32,
        )
        k0, k1 = (k0 + _PHILOX_KEY_STEP[0]) & _U32, (k1 + _PHILOX_KEY_STEP[1]) & _U32
    return c0, c1, c2, c3


def _halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Low and high 32-bit words of int64 x [B], as [B, 1] columns."""
    x = x.long().unsqueeze(1)
    return x & _U32, _high_word(x)


def sampling_uniforms(
    seeds: torch.Tensor, offsets: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """u [B, V] in (0, 1) for `sample_from_logits`. Token i of row b takes word i % 4 of
    Philox4x32-10 with counter (i // 4, offsets[b] low, offsets[b] high, 0) and key
    (seeds[b] low, seeds[b] high); the word's top 23 bits k give u = (k + 0.5) / 2**23,
    exact in float32."""
    groups = torch.arange((vocab_size + 3) // 4, device=seeds.device)
    zero = torch.zeros_like(groups)
    words = philox4x32((groups, *_halves(offsets), zero), _halves(seeds))
    bits = torch.stack(torch.broadcast_tensors(*words), dim=-1).flatten(1)[:, :vocab_size]
    return ((bits >> 9).float() + 0.5) * 2.0**-23


def sample_from_logits(
    logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """One token per row of processed logits [B, V] (any float dtype, no NaN; -inf masks
    a token), as int64 [B].

    temperature [B] float32: 0 makes row b greedy, the first index of its largest logit.
    Otherwise the row draws from softmax(logits[b] / temperature[b]) by an exponential race
    (the Gumbel-max trick): the first index of the largest
    logits[b, i] / temperature[b] - log(-log(u[b, i])), with u from `sampling_uniforms`
    of seeds and offsets (int64 [B]). A row's token depends only on its own logits,
    temperature, seed and offset: it is the same alone or in any batch.
    """
    draw = (temperature != 0).unsqueeze(1)
    x = logits.float()
    scaled = x / torch.where(draw, temperature.unsqueeze(1), 1.0)
    exponentials = -torch.log(sampling_uniforms(seeds, offsets, logits.shape[1]))
    return torch.where(draw, scaled - torch.log(exponentials), x).argmax(dim=-1)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [R, V] (any float dtype) with the tokens a grammar does not allow set to -inf:
    bit j of word k of bitmask [R, W] (int32) allows token 32k + j. Tokens past the
    bitmask's 32W are not allowed; bits past V are ignored."""
    ones = torch.ones(32, dtype=torch.int32, device=bitmask.device)  # made on the device:
    bits = ones << torch.arange(32, dtype=torch.int32, device=bitmask.device)  # no host sync
    allowed = ((bitmask.unsqueeze(-1) & bits) != 0).flatten(1)
    vocab_size = logits.shape[-1]
    if allowed.shape[1] < vocab_size:
        allowed = F.pad(allowed, (0, vocab_size - allowed.shape[1]))
    return torch.where(allowed[:, :vocab_size], logits, float("-inf"))


def all_reduce(x: torch.Tensor, group: Any) -> torch.Tensor:
    """The element-wise sum of `x` over the ranks of torch.distributed process group
    `group` (each rank passes a tensor of the same shape and dtype, and gets the sum). A
    collective, and the one op that may write its input: `x` is consumed (the result may be
    `x` itself), so callers pass a temporary. The reference is the collective backend's own
    (torch.distributed's); a platform's faster one (e.g. over device peer-to-peer links)
    registers as a provider."""
    dist.all_reduce(x, group=group)
    return x


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               eps: float) -> torch.Tensor:
    """(x - mean(x)) / sqrt(var(x) + eps) * weight (+ bias) over the last dim (biased
    variance), computed in float32, returned in x's dtype."""
    return F.layer_norm(x.float(), x.shape[-1:], weight.float(),
                        None if bias is None else bias.float(), eps).to(x.dtype)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(x), computed in float32; `approximate` is "none" (erf) or "tanh"."""
    return F.gelu(x.float(), approximate=approximate).to(x.dtype)


def encoder_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
    """Bidirectional attention of each sequence's tokens over its own: softmax(q k^T *
    scale) v per head, with query heads grouped over the kv heads (GQA), in float32.

    query [T, H, D], key and value [T, K, D]; sequence b owns rows
    query_start_loc[b]:query_start_loc[b + 1] (int32 [B + 1]); rows past the last
    sequence (padding) are zeros. Nothing is cached: a prompt attends to the tokens of its
    own step only. Returns [T, H, D] in query's dtype.
    """
    out = torch.zeros_like(query)
    group = query.shape[1] // key.shape[1]
    bounds = query_start_loc.tolist()
    for start, end in zip(bounds, bounds[1:]):
        q = query[start:end].float()
        k = key[start:end].float().repeat_interleave(group, dim=1)
        v = value[start:end].float().repeat_interleave(group, dim=1)
        probs = (torch.einsum("qhd,khd->hqk", q, k) * scale).softmax(dim=-1)
        out[start:end] = torch.einsum("hqk,khd->qhd", probs, v).to(query.dtype)
    return out
