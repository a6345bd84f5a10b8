"""The rotary embedding of one token's query and key heads in the epilogue of the one-row
matmul that computes them (the qkv projection), instead of a kernel of its own.

The rotation mixes two outputs of a head (neox: dims i and i + D/2; gptj: 2i and 2i + 1),
which two programs would compute under the matmuls' usual tiling. With `RowRotary` a
program's BLOCK_N outputs are BLOCK_N / 2 such pairs instead, of consecutive pair indices
(`rotary_tile_rows`); every head of the output, value heads included, is tiled so, and
only the rows before `rotated_rows` (the query and key heads) are rotated. Each output is
rounded to the output's type first, and the rotation is then the rotary kernel's float32
arithmetic (`rotary.py`) on the same values: the stored query and key are what the
matmul followed by the rotary kernel store. Full rotations only (rot_dim = head_size);
the matmul must not split K (its partial sums are added by another kernel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class RowRotary:
    """Rotate heads [0, rotated_rows / head_size) of the matmul's output, one token at
    `positions[0]`, with `cos_sin_cache` [max_position, head_size] (cos then sin)."""

    positions: torch.Tensor
    cos_sin_cache: torch.Tensor
    is_neox: bool
    head_size: int
    rotated_rows: int

    @staticmethod
    def fits(n: int, block_n: int, num_splits: int, head_size: int, rot_dim: int) -> bool:
        """Whether a matmul of N outputs tiled BLOCK_N a program, with `num_splits` K
        splits, can rotate its heads of `head_size` in its epilogue."""
        pairs = block_n // 2
        return (rot_dim == head_size and n % head_size == 0 and block_n % 2 == 0
                and num_splits == 1 and (head_size // 2) % pairs == 0)



def rotary_args(rotary: RowRotary | None, placeholder: torch.Tensor) -> tuple[Any, ...]:
    """The kernels' (positions_ptr, cos_sin_ptr, stride_cs, rotated_rows) arguments;
    without a rotary, `placeholder` for the pointers (never read)."""
    if rotary is None:
        return (placeholder, placeholder, 0, 0)
    cache = rotary.cos_sin_cache
    return (rotary.positions, cache, cache.stride(0), rotary.rotated_rows)


def rotary_constants(rotary: RowRotary | None) -> dict[str, Any]:
    """The kernels' ROTARY, IS_NEOX and HEAD_SIZE."""
    if rotary is None:
        return {"ROTARY": False, "IS_NEOX": True, "HEAD_SIZE": 2}
    return {"ROTARY": True, "IS_NEOX": rotary.is_neox, "HEAD_SIZE": rotary.head_size}


@triton.jit
def _pair_rows(pair, HEAD_SIZE: tl.constexpr, IS_NEOX: tl.constexpr):
    """(first row, second row, dim index i) of global pair indices `pair`."""
    head = pair // (HEAD_SIZE // 2)
    i = pair % (HEAD_SIZE // 2)
    if IS_NEOX:
        first = head * HEAD_SIZE + i
        second = first + HEAD_SIZE // 2
    else:
        first = head * HEAD_SIZE + 2 * i
        second = first + 1
    return first, second, i


@triton.jit
def rotary_tile_rows(tile, BLOCK_N: tl.constexpr, ROTARY: tl.constexpr,
                     HEAD_SIZE: tl.constexpr, IS_NEOX: tl.constexpr):
    """The output rows of column tile `tile`: BLOCK_N consecutive rows, or with ROTARY
    BLOCK_N / 2 rotation pairs, interleaved (first, second, first, second, ...)."""
    if ROTARY:
        PAIRS: tl.constexpr = BLOCK_N // 2
        first, second, _ = _pair_rows(tile * PAIRS + tl.arange(0, PAIRS), HEAD_SIZE, IS_NEOX)
        rows = tl.reshape(tl.join(first, second), (BLOCK_N,))
    else:
        rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    return rows


@triton.jit
def rotate_tile(y, tile, positions_ptr, cos_sin_ptr, stride_cs, rotated_rows,
                OUT_TYPE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_SIZE: tl.constexpr,
                IS_NEOX: tl.constexpr):
    """y [BLOCK_N] (float32, rows as `rotary_tile_rows` gives them with ROTARY) rounded to
    OUT_TYPE and rotated where its rows are below `rotated_rows`, as float32."""
    PAIRS: tl.constexpr = BLOCK_N // 2
    first, _, i = _pair_rows(tile * PAIRS + tl.arange(0, PAIRS), HEAD_SIZE, IS_NEOX)
    x1, x2 = tl.split(tl.reshape(y.to(OUT_TYPE).to(tl.float32), (PAIRS, 2)))
    row = cos_sin_ptr + tl.load(positions_ptr).to(tl.int64) * stride_cs
    cos = tl.load(row + i).to(tl.float32)
    sin = tl.load(row + HEAD_SIZE // 2 + i).to(tl.float32)
    rotate = first < rotated_rows
    y1 = tl.where(rotate, x1 * cos - x2 * sin, x1)
    y2 = tl.where(rotate, x2 * cos + x1 * sin, x2)
    return tl.reshape(tl.join(y1, y2), (BLOCK_N,))
