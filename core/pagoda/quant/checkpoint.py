"""Checkpoint tensors as a QuantMethod receives them: dense, or codes per group (GGUF)."""

from __future__ import annotations

import torch

from pagoda.quant.tensors import GroupQuantWeight

CheckpointTensor = torch.Tensor | GroupQuantWeight


def narrow(tensor: CheckpointTensor, dim: int, start: int, length: int) -> CheckpointTensor:
    """Elements start..start+length along `dim` of a checkpoint tensor."""
    return tensor.narrow(dim, start, length)


def dense(tensor: CheckpointTensor) -> torch.Tensor:
    """A checkpoint tensor as plain values (quantized ones dequantized)."""
    return tensor.dequantize() if isinstance(tensor, GroupQuantWeight) else tensor


def copy_weight(param: torch.Tensor, loaded: torch.Tensor, name: str) -> None:
    """param[...] = loaded, refusing a shape mismatch with a message naming the weight."""
    if param.shape != loaded.shape:
        raise ValueError(
            f"Weight {name!r} has shape {tuple(loaded.shape)}, the model expects "
            f"{tuple(param.shape)}"
        )
    param.copy_(loaded)
