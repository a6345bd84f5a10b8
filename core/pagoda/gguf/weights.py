"""Stream a GGUF file's tensors as HF-named float32 torch tensors (or Q4/Q8_0 ones as GroupQuantWeight)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from gguf import ReaderTensor
from transformers import PretrainedConfig

from pagoda.gguf.config import ArchSpec
from pagoda.gguf.dequant import check_supported, dequantize
from pagoda.gguf.names import hf_name
from pagoda.gguf.quantized import KEPT_TYPES, quantized_weight
from pagoda.gguf.rope import TENSOR as ROPE_FREQS
from pagoda.quant import CheckpointTensor, GroupQuantWeight


def unpermute_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head q/k row interleave.

    The converter reorders each head's rows from [first half | second half]
    (HF's rotate-half layout) to alternating pairs (h0, h1, h0, h1, ...).
    """
    rows = weight.shape[0]
    pairs = weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
    return pairs.transpose(1, 2).reshape(weight.shape)


def iter_hf_weights(
    tensors: Sequence[ReaderTensor],
    spec: ArchSpec,
    config: PretrainedConfig,
    keep_quantized: bool = False,
    done: Callable[[ReaderTensor], None] = lambda tensor: None,
    act_block: int | None = None,
) -> Iterator[tuple[str, CheckpointTensor]]:
    """(HF name, float32 tensor) for every tensor, dequantized one at a time.

    With `keep_quantized`, Q4_0/Q4_1/Q8_0 matrices come as `GroupQuantWeight` instead (with
    `act_block`: `quantized_weight`'s).
    `done(tensor)` runs once the consumer has taken the tensor's weight (asked for the next).
    Names and types are all checked before the first tensor is read, so a file that cannot
    load fails at once with a ValueError naming the tensor.
    """
    # rope_freqs is the config's RoPE scaling (`pagoda.gguf.rope`), not a weight.
    plan = [(tensor, hf_name(tensor.name)) for tensor in tensors if tensor.name != ROPE_FREQS]
    for tensor, _ in plan:
        check_supported(tensor.name, tensor.tensor_type)
    heads = {
        "q_proj": config.num_attention_heads,
        "k_proj": config.num_key_value_heads,
    }
    return _stream(plan, heads if spec.permuted_qk else {}, keep_quantized, done, act_block)


def _stream(
    plan: list[tuple[ReaderTensor, str]], permuted_heads: dict[str, int], keep_quantized: bool,
    done: Callable[[ReaderTensor], None], act_block: int | None,
) -> Iterator[tuple[str, CheckpointTensor]]:
    for tensor, name in plan:
        weight: CheckpointTensor
        if keep_quantized and tensor.tensor_type in KEPT_TYPES and len(tensor.shape) == 2:
            weight = quantized_weight(tensor, act_block)
        else:
            weight = torch.from_numpy(dequantize(tensor))
        n_heads = permuted_heads.get(name.split(".")[-2])
        if n_heads is not None:
            weight = _unpermute(weight, n_heads)
        yield name, weight
        done(tensor)


def _unpermute(weight: CheckpointTensor, n_heads: int) -> CheckpointTensor:
    if isinstance(weight, GroupQuantWeight):
        return weight.map_rows(lambda part: unpermute_rows(part, n_heads))
    return unpermute_rows(weight, n_heads)
