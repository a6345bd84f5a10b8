"""Conformance inputs of the quantized linears: random dense weights quantized to each
canonical form (`pagoda.quant.rtn`), over the linear shapes of `op_cases` and more."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight

# (leading shape of x, K, N, bias): one row, a few, 16, 33 (past small-batch kernels),
# sizes that are not multiples of any tile, a long K, and shapes of whole 16 x 128 tiles
# (5 and 12 rows; 12 past one 8-row MMA tile, K of 9 tiles: fewer than some kernels' K
# splits).
QUANT_SHAPES = (((1,), 256, 48, False), ((3,), 384, 40, True), ((2, 3), 128, 24, False),
                ((16,), 256, 130, True), ((1,), 2048, 20, True), ((33,), 128, 72, False),
                ((5,), 512, 64, True), ((12,), 1152, 32, False))


def _inputs(gen: torch.Generator, lead: tuple[int, ...], k: int, n: int, has_bias: bool,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    x = (torch.randn(*lead, k, generator=gen) * 2).to(dtype)
    w = torch.randn(n, k, generator=gen) * k**-0.5
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype) if has_bias else None
    return x, w, bias


def _case(op: str, label: str, x: torch.Tensor, weight: Any, bias: torch.Tensor | None,
          static: dict[str, Any]) -> Any:
    from pagoda.testing.op_cases import OpCase

    k, n = x.shape[-1], weight.shape[0]
    return OpCase(op, f"x{list(x.shape)} W[{n}, {k}] {label}{' bias' if bias is not None else ''}",
                  {"x": x, "weight": weight, "bias": bias},
                  {"dtype": x.dtype, "in_features": k, "out_features": n, **static})


def fp8_linear_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[Any]:
    """Per-row scales with dynamic per-token activations, a static input scale, and
    128 x 128 blocks (DeepSeek / HF fine-grained FP8) with per-token-group activations."""
    for i, (lead, k, n, has_bias) in enumerate(QUANT_SHAPES):
        x, w, bias = _inputs(gen, lead, k, n, has_bias, dtype)
        yield _case("fp8_linear", "per-row", x, fp8_weight(w), bias,
                    {"block": None, "static_input": False})
        if i % 2:
            weight = fp8_weight(w)
            static = x.float().abs().amax() / 448 * 1.5
            yield _case("fp8_linear", "per-row static-input",
                        x, type(weight)(weight.weight, weight.scale, static), bias,
                        {"block": None, "static_input": True})
        yield _case("fp8_linear", "block 128x128", x, fp8_weight(w, (128, 128)), bias,
                    {"block": (128, 128), "static_input": False})


def int8_linear_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[Any]:
    """Per-row weight scales, dynamic per-token activations (and a static input scale)."""
    for i, (lead, k, n, has_bias) in enumerate(QUANT_SHAPES):
        x, w, bias = _inputs(gen, lead, k, n, has_bias, dtype)
        weight = int8_weight(w)
        yield _case("int8_linear", "per-row", x, weight, bias, {"static_input": False})
        if i % 2:
            static = x.float().abs().amax() / 127 * 1.5
            yield _case("int8_linear", "per-row static-input", x,
                        type(weight)(weight.weight, weight.scale, static), bias,
                        {"static_input": True})


# (bits, group size, symmetric, act_block): GPTQ/AWQ/compressed-tensors 4-bit at the usual
# group sizes, GGUF Q4 (32, with a minimum) and Q8_0 (8 bits, 32), activations as they are;
# then GGUF Q4_1, Q4_0 and Q8_0 with their activations rounded to int8 blocks of 32 as ggml
# rounds them (gguf_a8), drawn after the others (their inputs unchanged by these).
WOQ_FORMATS = ((4, 128, True, None), (4, 128, False, None), (4, 32, False, None),
               (4, 64, True, None), (8, 32, True, None))
WOQ_A8_FORMATS = ((4, 32, False, 32), (4, 32, True, 32), (8, 32, True, 32))


def woq_linear_cases(dtype: torch.dtype, gen: torch.Generator) -> Iterator[Any]:
    for formats in (WOQ_FORMATS, WOQ_A8_FORMATS):
        for lead, k, n, has_bias in QUANT_SHAPES:
            for bits, group, symmetric, act_block in formats:
                if k % group:
                    continue
                x, w, bias = _inputs(gen, lead, k, n, has_bias, dtype)
                weight = dataclasses.replace(group_weight(w, bits, group, symmetric),
                                             act_block=act_block)
                label = f"int{bits} g{group} {'sym' if symmetric else 'asym'}"
                if act_block:
                    label += f" int8-x/{act_block}"
                yield _case("woq_linear", label, x, weight, bias,
                            {"bits": bits, "group_size": group, "act_block": act_block})
