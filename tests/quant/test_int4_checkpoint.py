"""GGUF Q4_0/Q4_1 blocks read as Int4Weight hold exactly the values gguf dequantizes."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from pagoda.gguf import GGUFModel
from pagoda.quant import Int4Weight
from pagoda.quant.checkpoint import dense


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1])
def test_int4_weights_equal_dequantized_ones(write_tiny, qtype):
    model = GGUFModel(write_tiny(lambda name: T.Q8_0 if name == "token_embd.weight" else qtype))
    expected = dict(model.iter_weights())
    kept = dict(model.iter_weights(keep_int4=True))
    assert kept.keys() == expected.keys()
    for name, tensor in kept.items():
        # Every linear weight is Q4 in the file; the Q8_0 embedding and F32 norms are not.
        assert isinstance(tensor, Int4Weight) == name.endswith("_proj.weight"), name
        if isinstance(tensor, Int4Weight):
            assert tensor.codes.dtype == torch.uint8 and int(tensor.codes.max()) <= 15
            assert tensor.group_size == 32
        # q/k rows are un-permuted in all three parts, so the values match exactly.
        assert torch.equal(dense(tensor), expected[name]), name

def test_q4_0_offsets_are_minus_eight_scales(write_tiny):
    model = GGUFModel(write_tiny(lambda name: T.Q4_0))
    weight = dict(model.iter_weights(keep_int4=True))["model.layers.1.mlp.down_proj.weight"]
    assert isinstance(weight, Int4Weight)
    assert torch.equal(weight.offsets, -8 * weight.scales)
