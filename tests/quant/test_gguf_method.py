"""GGUF layers (codes kept, applied by `woq_linear`) against the dense layer of the same
dequantized weights. Layers built outside a worker use the ops' references."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

from pagoda.gguf.quantized import quantized_weight
from pagoda.models.layers.linear import Linear, QKVParallelLinear
from pagoda.quant import GroupQuantWeight
from pagoda.quant.gguf import GGUFMethod


def q4(rows: int, cols: int, qtype: T, seed: int = 0) -> GroupQuantWeight:
    """Random data quantized by gguf, read back through pagoda's block parser."""
    data = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
    tensor = SimpleNamespace(name=f"w{seed}", tensor_type=qtype, shape=np.array([cols, rows]),
                             data=quantize(data * cols**-0.5, qtype))
    return quantized_weight(tensor)


def assert_close_bf16(y: torch.Tensor, ref: torch.Tensor) -> None:
    """Within what bfloat16 activations, scales and outputs allow."""
    assert y.dtype == ref.dtype and y.shape == ref.shape
    err = (y.float() - ref.float()).abs().max() / ref.float().abs().max()
    assert err < 1e-2, f"relative error {float(err):.4f}"


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q8_0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 7])
def test_kept_qkv_matches_dense(qtype, dtype, tokens):
    layer = QKVParallelLinear(64, 16, 4, 2, bias=True, dtype=dtype, quant_method=GGUFMethod())
    shards = {"q_proj": q4(64, 64, qtype, 1), "k_proj": q4(32, 64, qtype, 2),
              "v_proj": q4(32, 64, qtype, 3)}
    with torch.no_grad():
        for shard, weight in shards.items():
            layer.load_checkpoint_tensor("weight", weight, shard, shard)
        layer.bias.copy_(torch.randn(128))
    layer.quant_method.process_weights_after_loading(layer)
    assert isinstance(layer.qweight, GroupQuantWeight)  # the reference's prepare keeps it
    assert layer.qweight.bits == (8 if qtype == T.Q8_0 else 4)
    assert not hasattr(layer, "weight")  # the loading tensors are gone
    dense = torch.cat([w.dequantize() for w in shards.values()]).to(dtype)
    x = torch.randn(tokens, 64, dtype=dtype)
    assert_close_bf16(layer(x), F.linear(x, dense, layer.bias))


@pytest.mark.parametrize("k_type", [None, T.Q8_0])
def test_a_part_of_another_type_makes_the_layer_dense(k_type):
    layer = QKVParallelLinear(64, 16, 4, 2, dtype=torch.float32, quant_method=GGUFMethod())
    q, v = q4(64, 64, T.Q4_1, 1), q4(32, 64, T.Q4_0, 3)
    # e.g. a Q6_K tensor, dequantized by the reader; or Q8_0 beside Q4 parts
    k = torch.randn(32, 64) if k_type is None else q4(32, 64, k_type, 2)
    with torch.no_grad():
        layer.load_checkpoint_tensor("weight", q, "q_proj", "q")
        layer.load_checkpoint_tensor("weight", k, "k_proj", "k")
        layer.load_checkpoint_tensor("weight", v, "v_proj", "v")
    layer.quant_method.process_weights_after_loading(layer)
    k = k if k_type is None else k.dequantize()
    dense = torch.cat([q.dequantize(), k, v.dequantize()])
    assert layer.weight.dtype == torch.float32
    assert torch.equal(layer.weight, dense)
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), F.linear(x, dense))


def test_inputs_that_are_not_whole_blocks_stay_dense():
    layer = Linear(40, 64, dtype=torch.float32, quant_method=GGUFMethod())  # 40 % 32 != 0
    weight = torch.randn(64, 40)
    with torch.no_grad():
        layer.load_checkpoint_tensor("weight", weight, None, "w")
    layer.quant_method.process_weights_after_loading(layer)
    assert torch.equal(layer.weight, weight)
    x = torch.randn(2, 40)
    assert torch.equal(layer(x), F.linear(x, weight))


def test_shape_mismatch_names_the_weight():
    layer = Linear(64, 64, dtype=torch.float32, quant_method=GGUFMethod())
    with pytest.raises(ValueError, match="'blk.w' has shape"), torch.no_grad():
        layer.load_checkpoint_tensor("weight", q4(32, 64, T.Q4_0), None, "blk.w")
