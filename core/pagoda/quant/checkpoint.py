"""Checkpoint tensors as a QuantMethod receives them: dense, or 4-bit codes per group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Int4Weight:
    """A [rows, cols] weight as 4-bit codes with a scale and offset per group of columns.

    w[r, c] = scales[r, g] * codes[r, c] + offsets[r, g] with g = c // group_size (GGUF Q4_1;
    Q4_0 has offsets = -8 * scales).
    """

    codes: torch.Tensor
    """uint8 [rows, cols], values 0..15."""
    scales: torch.Tensor
    """float32 [rows, cols // group_size]."""
    offsets: torch.Tensor
    """float32 [rows, cols // group_size]."""

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def group_size(self) -> int:
        return self.codes.shape[1] // self.scales.shape[1]

    def map_rows(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Int4Weight:
        """The same weight with `fn` (a reordering of rows) applied to every part."""
        return Int4Weight(fn(self.codes), fn(self.scales), fn(self.offsets))

    def narrow(self, dim: int, start: int, length: int) -> Int4Weight:
        """Rows (dim 0) or columns (dim 1, whole groups only) start..start+length."""
        if dim == 0:
            return self.map_rows(lambda t: t.narrow(0, start, length))
        group = self.group_size
        if start % group or length % group:
            raise ValueError(f"columns {start}..{start + length} of a 4-bit weight cut its "
                             f"groups of {group}")
        return Int4Weight(self.codes.narrow(1, start, length),
                          self.scales.narrow(1, start // group, length // group),
                          self.offsets.narrow(1, start // group, length // group))

    def dequantize(self) -> torch.Tensor:
        """The float32 [rows, cols] values."""
        rows, cols = self.codes.shape
        groups = self.codes.view(rows, -1, self.group_size).float()
        values = groups * self.scales.unsqueeze(-1) + self.offsets.unsqueeze(-1)
        return values.view(rows, cols)


CheckpointTensor = torch.Tensor | Int4Weight


def narrow(tensor: CheckpointTensor, dim: int, start: int, length: int) -> CheckpointTensor:
    """Elements start..start+length along `dim` of a checkpoint tensor."""
    return tensor.narrow(dim, start, length)


def dense(tensor: CheckpointTensor) -> torch.Tensor:
    """A checkpoint tensor as plain values (quantized ones dequantized)."""
    return tensor.dequantize() if isinstance(tensor, Int4Weight) else tensor


def copy_weight(param: torch.Tensor, loaded: torch.Tensor, name: str) -> None:
    """param[...] = loaded, refusing a shape mismatch with a message naming the weight."""
    if param.shape != loaded.shape:
        raise ValueError(
            f"Weight {name!r} has shape {tuple(loaded.shape)}, the model expects "
            f"{tuple(param.shape)}"
        )
    param.copy_(loaded)
