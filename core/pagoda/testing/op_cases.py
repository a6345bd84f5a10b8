"""Fresh random inputs for every core op, over shapes chosen to find the usual bugs:
odd sizes, partial rotary, both rotary styles, masked and tied logits. (Attention over the
paged KV cache is not an op: `pagoda.testing.attention_conformance` certifies attention
backends.)

Inputs are made on the host from a seeded generator, so a failure is reproducible from
(op, dtype, seed) alone. `args` are in the reference's parameter order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pagoda.quant.tensors import ACTIVATION_CODES
from pagoda.testing.lora_cases import lora_expand_cases, lora_shrink_cases
from pagoda.testing.moe_cases import fused_moe_cases
from pagoda.testing.quant_cases import fp8_linear_cases, int8_linear_cases, woq_linear_cases
from pagoda.testing.tolerances import dtype_name


@dataclass
class OpCase:
    """One call of an op: its arguments and the static arguments a provider's
    `supports(**static_args)` is asked about."""

    op: str
    label: str
    args: dict[str, Any]
    static_args: dict[str, Any]


def _randn(
    gen: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def _weight(gen: torch.Generator, size: int, dtype: torch.dtype) -> torch.Tensor:
    return (1.0 + 0.1 * torch.randn(size, generator=gen)).to(dtype)


# (leading shape of x, K, N, bias): one row (a decode), odd sizes, 16 rows and more, leading
# dims, a K long enough that GPUs split it, and more rows than the small-batch kernels take.
LINEAR_SHAPES = (((1,), 64, 48, False), ((3,), 200, 37, True), ((2, 3), 40, 24, False),
                 ((16,), 96, 130, True), ((1,), 2056, 20, True), ((5,), 1030, 72, False),
                 ((33,), 72, 40, True))


def linear_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    """Weights scaled by 1/sqrt(K): outputs of order one at any K."""
    for lead, k, n, has_bias in LINEAR_SHAPES:
        args = {"x": _randn(gen, *lead, k, dtype=dtype),
                "weight": _randn(gen, n, k, dtype=dtype, scale=k**-0.5),
                "bias": _randn(gen, n, dtype=dtype) if has_bias else None}
        label = f"x{[*lead, k]} W[{n}, {k}]{' bias' if has_bias else ''}"
        yield OpCase("linear", label, args, {"dtype": dtype, "in_features": k,
                                             "out_features": n})


# (shape, eps, scale of x): the last has values so small that eps dominates the mean square.
NORM_SHAPES = (((1, 8), 1e-6, 3.0), ((7, 33), 1e-5, 3.0), ((3, 5, 128), 1e-6, 3.0),
               ((16, 1024), 1e-6, 3.0), ((4, 64), 1e-5, 1e-3))


def _norm_cases(
    dtype: torch.dtype,
) -> Iterator[tuple[str, tuple[int, ...], float, float, torch.dtype]]:
    """(label, shape, eps, scale, dtype of the weight or residual) for both norms; the last
    case keeps that operand in float32, as some models do."""
    for shape, eps, scale in NORM_SHAPES:
        yield f"x{list(shape)}*{scale:g} eps={eps:g}", shape, eps, scale, dtype
    yield "x[5, 96]*3 eps=1e-06 (float32 operand)", (5, 96), 1e-6, 3.0, torch.float32


def rms_norm_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for label, shape, eps, scale, weight_dtype in _norm_cases(dtype):
        args = {"x": _randn(gen, *shape, dtype=dtype, scale=scale),
                "weight": _weight(gen, shape[-1], weight_dtype), "eps": eps}
        yield OpCase("rms_norm", label, args, {"dtype": dtype, "hidden_size": shape[-1]})


def fused_add_rms_norm_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for label, shape, eps, scale, residual_dtype in _norm_cases(dtype):
        args = {"x": _randn(gen, *shape, dtype=dtype, scale=scale),
                "residual": _randn(gen, *shape, dtype=residual_dtype, scale=scale),
                "weight": _weight(gen, shape[-1], dtype), "eps": eps}
        yield OpCase("fused_add_rms_norm", label, args,
                     {"dtype": dtype, "hidden_size": shape[-1]})


def fused_add_rms_norm_quant_cases(dtype: torch.dtype,
                                   gen: torch.Generator) -> Iterator[OpCase]:
    """fused_add_rms_norm's cases with the normed output quantized to each code type; and
    a row of zeros (the smallest scale)."""
    for code in ACTIVATION_CODES:
        for case in fused_add_rms_norm_cases(dtype, gen):
            yield OpCase("fused_add_rms_norm_quant", f"{case.label} {dtype_name(code)}",
                         {**case.args, "code_dtype": code}, case.static_args)
        x, residual = _randn(gen, 3, 256, dtype=dtype), _randn(gen, 3, 256, dtype=dtype)
        x[1], residual[1] = 0, 0
        args = {"x": x, "residual": residual, "weight": _weight(gen, 256, dtype), "eps": 1e-6,
                "code_dtype": code}
        yield OpCase("fused_add_rms_norm_quant", f"x[3, 256] row 1 all 0 {dtype_name(code)}",
                     args, {"dtype": dtype, "hidden_size": 256})


def cos_sin_cache(max_positions: int, rot_dim: int, base: float = 10000.0) -> torch.Tensor:
    """[max_positions, rot_dim] float32: cos in the first half, sin in the second."""
    inv_freq = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float32) / rot_dim)
    angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


# (tokens, heads, kv_heads, head_size, rot_dim)
ROTARY_SHAPES = ((5, 4, 4, 64, 64), (7, 8, 2, 128, 64), (3, 6, 1, 80, 32), (1, 2, 2, 16, 16))


def rotary_embedding_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    max_positions = 64
    for i, (tokens, heads, kv_heads, head_size, rot_dim) in enumerate(ROTARY_SHAPES):
        # The cache is kept in float32 by some models and in the model dtype by others.
        cache_dtype = torch.float32 if i % 2 == 0 else dtype
        for is_neox in (True, False):
            args = {
                # Position 0 would rotate by nothing and hide bugs.
                "positions": torch.randint(1, max_positions, (tokens,), generator=gen),
                "query": _randn(gen, tokens, heads, head_size, dtype=dtype),
                "key": _randn(gen, tokens, kv_heads, head_size, dtype=dtype),
                "cos_sin_cache": cos_sin_cache(max_positions, rot_dim).to(cache_dtype),
                "is_neox": is_neox,
            }
            label = (f"T={tokens} H={heads} K={kv_heads} D={head_size} rot_dim={rot_dim} "
                     f"{'neox' if is_neox else 'gptj'} cache={dtype_name(cache_dtype)}")
            yield OpCase("rotary_embedding", label, args,
                         {"dtype": dtype, "head_size": head_size, "rot_dim": rot_dim,
                          "is_neox": is_neox})


ACTIVATION_SHAPES = ((1, 2 * 7), (7, 2 * 37), (3, 5, 2 * 64), (4, 2 * 2048))


def silu_and_mul_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for shape in ACTIVATION_SHAPES:
        yield OpCase("silu_and_mul", f"x{list(shape)}",
                     {"x": _randn(gen, *shape, dtype=dtype, scale=3.0)},
                     {"dtype": dtype, "intermediate_size": shape[-1] // 2})


def silu_and_mul_quant_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for code in ACTIVATION_CODES:
        for case in silu_and_mul_cases(dtype, gen):
            yield OpCase("silu_and_mul_quant", f"{case.label} {dtype_name(code)}",
                         {**case.args, "code_dtype": code}, case.static_args)


def gelu_and_mul_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for shape in ACTIVATION_SHAPES:
        for approximate in ("none", "tanh"):
            yield OpCase("gelu_and_mul", f"x{list(shape)} approximate={approximate}",
                         {"x": _randn(gen, *shape, dtype=dtype, scale=3.0),
                          "approximate": approximate},
                         {"dtype": dtype, "intermediate_size": shape[-1] // 2,
                          "approximate": approximate})


def layer_norm_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    """The norm shapes, with a bias and without; x offset from zero, so that a kernel that
    skips the mean is caught."""
    for i, (label, shape, eps, scale, weight_dtype) in enumerate(_norm_cases(dtype)):
        bias = _randn(gen, shape[-1], dtype=weight_dtype, scale=0.1) if i % 2 == 0 else None
        args = {"x": (_randn(gen, *shape, dtype=torch.float32, scale=scale) + scale).to(dtype),
                "weight": _weight(gen, shape[-1], weight_dtype), "bias": bias, "eps": eps}
        yield OpCase("layer_norm", f"{label}{' bias' if bias is not None else ''}", args,
                     {"dtype": dtype, "hidden_size": shape[-1]})


def gelu_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    for shape in ACTIVATION_SHAPES:
        for approximate in ("none", "tanh"):
            yield OpCase("gelu", f"x{list(shape)} approximate={approximate}",
                         {"x": _randn(gen, *shape, dtype=dtype, scale=3.0),
                          "approximate": approximate},
                         {"dtype": dtype, "approximate": approximate})


# (sequence lengths, padding rows after them, heads, kv heads, head size)
ENCODER_ATTENTION_SHAPES = (([5], 0, 4, 4, 32), ([3, 17, 1], 0, 8, 2, 64),
                            ([9, 4], 2, 6, 1, 80), ([130], 0, 2, 2, 128))


def encoder_attention_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    """One sequence and several (a token alone among them), grouped kv heads, padding rows
    after the last sequence (their output is zero), and a sequence longer than a tile."""
    for lens, padding, heads, kv_heads, head_size in ENCODER_ATTENTION_SHAPES:
        tokens = sum(lens) + padding
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        args = {"query": _randn(gen, tokens, heads, head_size, dtype=dtype),
                "key": _randn(gen, tokens, kv_heads, head_size, dtype=dtype),
                "value": _randn(gen, tokens, kv_heads, head_size, dtype=dtype),
                "query_start_loc": torch.tensor(starts, dtype=torch.int32),
                "scale": head_size**-0.5}
        label = f"lens={lens} padding={padding} H={heads} K={kv_heads} D={head_size}"
        yield OpCase("encoder_attention", label, args,
                     {"dtype": dtype, "head_size": head_size})


SAMPLE_SHAPES = ((1, 1), (4, 7), (6, 1000), (3, 2051), (4, 4096))
"""(rows, vocabulary): one token, odd sizes, several tiles of 1024 tokens per row."""


def sample_from_logits_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    """Greedy and random rows (temperatures 1e-3 to 10), seeds over all of int64, offsets
    past 2**32, masked tokens, a fully masked row, and a tie for a greedy row's top. The
    drawn token ids must equal the reference's exactly."""
    for rows, vocab in SAMPLE_SHAPES:
        logits = torch.randn(rows, vocab, generator=gen) * 3
        logits[torch.rand(rows, vocab, generator=gen) < 0.2] = -math.inf
        logits[0, vocab // 3] = logits[0, vocab // 2] = logits[0].max() + 1
        temperature = 10.0 ** (torch.rand(rows, generator=gen) * 4 - 3)
        temperature[::2] = 0.0
        if rows > 2:
            logits[2] = -math.inf
        args = {
            "logits": logits.to(dtype),
            "temperature": temperature,
            "seeds": torch.randint(-(2**63), 2**63 - 1, (rows,), generator=gen),
            "offsets": torch.randint(0, 2**40, (rows,), generator=gen),
        }
        yield OpCase("sample_from_logits", f"B={rows} V={vocab}", args,
                     {"dtype": dtype, "vocab_size": vocab})


BITMASK_SHAPES = ((1, 32, 1), (3, 100, 4), (5, 1000, 32), (2, 4096, 128), (2, 70, 2))
"""(rows, vocabulary, bitmask words): one word, a vocabulary not a multiple of 32, a
bitmask wider than the vocabulary (a padded one), and one narrower (tokens past it)."""


def apply_token_bitmask_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[OpCase]:
    """Random bitmasks (every bit pattern of int32, the sign bit included), rows allowing
    everything and nothing, over logits with some -inf already."""
    for rows, vocab, words in BITMASK_SHAPES:
        logits = torch.randn(rows, vocab, generator=gen) * 3
        logits[torch.rand(rows, vocab, generator=gen) < 0.1] = -math.inf
        bitmask = torch.randint(-(2**31), 2**31 - 1, (rows, words), generator=gen,
                                dtype=torch.int64).to(torch.int32)
        bitmask[0] = -1
        if rows > 1:
            bitmask[-1] = 0
        yield OpCase("apply_token_bitmask", f"R={rows} V={vocab} W={words}",
                     {"logits": logits.to(dtype), "bitmask": bitmask},
                     {"dtype": dtype, "vocab_size": vocab})


CASE_GENERATORS: dict[str, Callable[[torch.dtype, torch.Generator], Iterator[OpCase]]] = {
    "linear": linear_cases,
    "rms_norm": rms_norm_cases,
    "fused_add_rms_norm": fused_add_rms_norm_cases,
    "fused_add_rms_norm_quant": fused_add_rms_norm_quant_cases,
    "rotary_embedding": rotary_embedding_cases,
    "silu_and_mul": silu_and_mul_cases,
    "silu_and_mul_quant": silu_and_mul_quant_cases,
    "gelu_and_mul": gelu_and_mul_cases,
    "sample_from_logits": sample_from_logits_cases,
    "apply_token_bitmask": apply_token_bitmask_cases,
    "fp8_linear": fp8_linear_cases,
    "int8_linear": int8_linear_cases,
    "woq_linear": woq_linear_cases,
    "fused_moe": fused_moe_cases,
    "layer_norm": layer_norm_cases,
    "gelu": gelu_cases,
    "encoder_attention": encoder_attention_cases,
    "lora_shrink": lora_shrink_cases,
    "lora_expand": lora_expand_cases,
}


def op_cases(op: str, dtype: torch.dtype, seed: int = 0) -> list[OpCase]:
    """Every case of `op` in `dtype`, drawn fresh from `seed`."""
    if op not in CASE_GENERATORS:
        raise KeyError(f"No conformance inputs for op {op!r}: add a generator to "
                       f"pagoda.testing.op_cases (known: {', '.join(sorted(CASE_GENERATORS))})")
    gen = torch.Generator().manual_seed(seed)
    return list(CASE_GENERATORS[op](dtype, gen))
