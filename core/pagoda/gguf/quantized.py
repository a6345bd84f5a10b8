"""GGUF Q4_0, Q4_1 and Q8_0 blocks -> GroupQuantWeight (codes, scales, offsets per block of
32 weights of a row), without dequantizing.

A Q4 block: a float16 scale d (Q4_1: then a float16 minimum m), then 16 bytes whose low
nibbles are weights 0-15 and high nibbles 16-31. Q4_1: w = d * q + m; Q4_0: w = d * (q - 8),
so offset = -8 d. A Q8_0 block: a float16 scale d, then 32 signed bytes q: w = d * q, kept as
codes q + 128 with offset = -128 d.

With `act_block` 32 (quantization gguf_a8) the weight asks for its activations rounded to
int8 per block of 32 (`GroupQuantWeight.act_block`), as ggml's CPU dot products round
them (Q8_0 / Q8_1 activations): the model computes as llama.cpp computes it.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import ReaderTensor

from pagoda.gguf.dequant import torch_shape
from pagoda.quant import GroupQuantWeight

BLOCK = 32
KEPT_TYPES: frozenset[T] = frozenset({T.Q4_0, T.Q4_1, T.Q8_0})
"""The block types a GGUF weight keeps quantized (the others are dequantized)."""


def _f16(raw: np.ndarray) -> np.ndarray:
    """Two bytes per entry on the last axis -> float32 values of those float16s."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def quantized_weight(tensor: ReaderTensor, act_block: int | None = None) -> GroupQuantWeight:
    """The Q4_0/Q4_1/Q8_0 matrix `tensor` as codes and per-block scales and offsets."""
    if tensor.tensor_type not in KEPT_TYPES:
        raise ValueError(f"GGUF tensor {tensor.name!r} is {tensor.tensor_type.name}, not one of "
                         f"{sorted(t.name for t in KEPT_TYPES)}")
    shape = torch_shape(tensor)
    if len(shape) != 2:
        raise ValueError(f"GGUF tensor {tensor.name!r} has shape {shape}; expected a matrix")
    rows, cols = shape
    blocks = np.asarray(tensor.data).reshape(rows, cols // BLOCK, -1)
    scales = _f16(blocks[..., 0:2])
    if tensor.tensor_type == T.Q8_0:
        codes = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return GroupQuantWeight(torch.from_numpy(codes.reshape(rows, cols)),
                                torch.from_numpy(scales), torch.from_numpy(-128 * scales), bits=8,
                                act_block=act_block)
    if tensor.tensor_type == T.Q4_1:
        offsets, qs = _f16(blocks[..., 2:4]), blocks[..., 4:]
    else:
        offsets, qs = -8 * scales, blocks[..., 2:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(rows, cols)
    return GroupQuantWeight(torch.from_numpy(codes), torch.from_numpy(scales),
                            torch.from_numpy(offsets), bits=4, act_block=act_block)
