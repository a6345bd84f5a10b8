"""GGUFInt4Method layers against the dense layer of the same dequantized weights."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

from pagoda.gguf.int4 import int4_weight
from pagoda.models.layers.linear import Linear, QKVParallelLinear
from pagoda.quant import Int4Weight

pytest.importorskip("pagoda_cpu")
from pagoda_cpu.quant_gguf import GGUFInt4Method  # noqa: E402


def q4(rows: int, cols: int, qtype: T, seed: int = 0) -> Int4Weight:
    """Random data quantized by gguf, read back through pagoda's block parser."""
    data = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
    tensor = SimpleNamespace(name=f"w{seed}", tensor_type=qtype, shape=np.array([cols, rows]),
                             data=quantize(data * cols**-0.5, qtype))
    return int4_weight(tensor)


def assert_close_bf16(y: torch.Tensor, ref: torch.Tensor) -> None:
    """Within what bfloat16 activations, scales and outputs allow."""
    assert y.dtype == ref.dtype and y.shape == ref.shape
    err = (y.float() - ref.float()).abs().max() / ref.float().abs().max()
    assert err < 1e-2, f"relative error {float(err):.4f}"


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 7])
def test_packed_qkv_matches_dense(qtype, dtype, tokens):
    layer = QKVParallelLinear(64, 16, 4, 2, bias=True, dtype=dtype, quant_method=GGUFInt4Method())
    shards = {"q_proj": q4(64, 64, qtype, 1), "k_proj": q4(32, 64, qtype, 2),
              "v_proj": q4(32, 64, qtype, 3)}
    with torch.no_grad():
        for shard, weight in shards.items():
            layer.quant_method.load_weight(layer, weight, shard, shard)
        layer.bias.copy_(torch.randn(128))
    layer.quant_method.process_weights_after_loading(layer)
    assert layer.weight.dtype == torch.uint8 and layer.weight.numel() == 128 * 64 // 2
    dense = torch.cat([w.dequantize() for w in shards.values()]).to(dtype)
    x = torch.randn(tokens, 64, dtype=dtype)
    assert_close_bf16(layer(x), F.linear(x, dense, layer.bias))


def test_a_shard_that_is_not_q4_makes_the_layer_dense():
    layer = QKVParallelLinear(64, 16, 4, 2, dtype=torch.float32, quant_method=GGUFInt4Method())
    q, v = q4(64, 64, T.Q4_1, 1), q4(32, 64, T.Q4_0, 3)
    k = torch.randn(32, 64)  # e.g. a Q8_0 tensor, dequantized by the reader
    with torch.no_grad():
        layer.quant_method.load_weight(layer, q, "q_proj", "q")
        layer.quant_method.load_weight(layer, k, "k_proj", "k")
        layer.quant_method.load_weight(layer, v, "v_proj", "v")
    layer.quant_method.process_weights_after_loading(layer)
    dense = torch.cat([q.dequantize(), k, v.dequantize()])
    assert layer.weight.dtype == torch.float32
    assert torch.equal(layer.weight, dense)
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), F.linear(x, dense))


def test_a_shape_the_kernel_cannot_take_stays_dense():
    layer = Linear(64, 40, dtype=torch.float32, quant_method=GGUFInt4Method())  # 40 % 16 != 0
    weight = q4(40, 64, T.Q4_1)
    with torch.no_grad():
        layer.quant_method.load_weight(layer, weight, None, "w")
    layer.quant_method.process_weights_after_loading(layer)
    assert torch.equal(layer.weight, weight.dequantize())


def test_shape_mismatch_names_the_weight():
    layer = Linear(64, 64, dtype=torch.float32, quant_method=GGUFInt4Method())
    with pytest.raises(ValueError, match="'blk.w' has shape"), torch.no_grad():
        layer.quant_method.load_weight(layer, q4(32, 64, T.Q4_0), None, "blk.w")
