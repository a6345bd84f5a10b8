"""GGUF Q4_0/Q4_1/Q8_0 blocks read as GroupQuantWeight hold exactly the values gguf
dequantizes."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from pagoda.gguf import GGUFModel
from pagoda.quant import GroupQuantWeight
from pagoda.quant.checkpoint import dense


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q8_0])
def test_kept_weights_equal_dequantized_ones(write_tiny, qtype):
    model = GGUFModel(write_tiny(lambda name: T.F16 if name == "token_embd.weight" else qtype))
    expected = dict(model.iter_weights())
    kept = dict(model.iter_weights(keep_quantized=True))
    assert kept.keys() == expected.keys()
    bits = 8 if qtype == T.Q8_0 else 4
    for name, tensor in kept.items():
        # Every linear weight has the block type; the F16 embedding and F32 norms do not.
        assert isinstance(tensor, GroupQuantWeight) == name.endswith("_proj.weight"), name
        if isinstance(tensor, GroupQuantWeight):
            assert tensor.codes.dtype == torch.uint8 and int(tensor.codes.max()) < 2**bits
            assert tensor.group_size == 32 and tensor.bits == bits
        # q/k rows are un-permuted in all three parts, so the values match exactly.
        assert torch.equal(dense(tensor), expected[name]), name


@pytest.mark.parametrize(("qtype", "zero"), [(T.Q4_0, 8), (T.Q8_0, 128)])
def test_symmetric_blocks_have_offsets_of_minus_zero_scales(write_tiny, qtype, zero):
    model = GGUFModel(write_tiny(lambda name: qtype))
    weight = dict(model.iter_weights(keep_quantized=True))["model.layers.1.mlp.down_proj.weight"]
    assert isinstance(weight, GroupQuantWeight)
    assert torch.equal(weight.offsets, -zero * weight.scales)
