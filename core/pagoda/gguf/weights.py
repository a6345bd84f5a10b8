"""Stream a GGUF file's tensors as HF-named float32 torch tensors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from gguf import ReaderTensor
from transformers import PretrainedConfig

from pagoda.gguf.config import ArchSpec
from pagoda.gguf.dequant import check_supported, dequantize
from pagoda.gguf.names import hf_name


def unpermute_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head q/k row interleave.

    The converter reorders each head's rows from [first half | second half]
    (HF's rotate-half layout) to alternating pairs (h0, h1, h0, h1, ...).
    """
    rows = weight.shape[0]
    pairs = weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
    return pairs.transpose(1, 2).reshape(weight.shape)


def iter_hf_weights(
    tensors: Sequence[ReaderTensor], spec: ArchSpec, config: PretrainedConfig
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, float32 tensor) for every tensor, dequantized one at a time.

    Names and types are all checked before the first tensor is read, so a file
    that cannot load fails at once with a ValueError naming the tensor.
    """
    plan = [(tensor, hf_name(tensor.name)) for tensor in tensors]
    for tensor, _ in plan:
        check_supported(tensor.name, tensor.tensor_type)
    heads = {
        "q_proj": config.num_attention_heads,
        "k_proj": config.num_key_value_heads,
    }
    return _stream(plan, heads if spec.permuted_qk else {})


def _stream(
    plan: list[tuple[ReaderTensor, str]], permuted_heads: dict[str, int]
) -> Iterator[tuple[str, torch.Tensor]]:
    for tensor, name in plan:
        weight = torch.from_numpy(dequantize(tensor))
        proj = name.split(".")[-2]
        if proj in permuted_heads:
            weight = unpermute_rows(weight, permuted_heads[proj])
        yield name, weight
