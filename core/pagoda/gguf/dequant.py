"""GGUF tensor data -> float32 arrays in PyTorch dimension order."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import ReaderTensor
from gguf.quants import dequantize as gguf_dequantize

SUPPORTED_TENSOR_TYPES: frozenset[T] = frozenset(
    {T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K}
)


def check_supported(name: str, qtype: T) -> None:
    """Raise a ValueError naming the tensor when its type cannot be dequantized."""
    if qtype not in SUPPORTED_TENSOR_TYPES:
        supported = ", ".join(sorted(t.name for t in SUPPORTED_TENSOR_TYPES))
        raise ValueError(
            f"GGUF tensor {name!r} has unsupported type {qtype.name}; supported: {supported}"
        )


def torch_shape(tensor: ReaderTensor) -> tuple[int, ...]:
    """GGUF lists dimensions innermost first; PyTorch lists them outermost first."""
    return tuple(int(d) for d in reversed(tensor.shape))


def dequantize(tensor: ReaderTensor) -> np.ndarray:
    """A fresh float32 array holding `tensor`'s values (never a view of the file)."""
    check_supported(tensor.name, tensor.tensor_type)
    values = gguf_dequantize(tensor.data, tensor.tensor_type)
    if np.may_share_memory(values, tensor.data):
        values = values.copy()
    return values.astype(np.float32, copy=False).reshape(torch_shape(tensor))
