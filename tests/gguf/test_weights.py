"""GGUF tensors -> HF-named float32 tensors: SmolLM2 against transformers, tiny files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType

from pagoda.gguf import GGUFModel


@pytest.fixture(scope="module")
def hf_state_dict(smollm2_path) -> dict[str, torch.Tensor]:
    """transformers' own dequantized SmolLM2 (loaded once per module, about 20 s)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name, dtype=torch.float32
    )
    return model.state_dict()


@pytest.mark.slow
def test_smollm2_weights_match_transformers(smollm2, hf_state_dict):
    model = smollm2
    expected = dict(hf_state_dict)
    if model.config.tie_word_embeddings:
        lm_head = expected.pop("lm_head.weight")
        assert lm_head.data_ptr() == expected["model.embed_tokens.weight"].data_ptr()
    seen = set()
    for name, tensor in model.iter_weights():
        assert name in expected, f"{name} is not in transformers' state dict"
        assert tensor.dtype == torch.float32
        assert tensor.shape == expected[name].shape, name
        assert torch.equal(tensor, expected[name]), name
        seen.add(name)
    assert seen == set(expected)


def converter_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: each head's two rotary halves interleaved row by row."""
    rows = weight.shape[0]
    halves = weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
    return halves.swapaxes(1, 2).reshape(weight.shape)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_names_shapes_and_qk_order(write_gguf, tiny_tensors, arch):
    hf = tiny_tensors(arch, tied=False, bias=True)  # the HF layout we want back
    stored = dict(hf)
    if arch == "llama":  # llama.cpp permutes q/k of the llama architecture only
        for name in [n for n in hf if ".attn_q." in n]:
            stored[name] = converter_permute(hf[name], 4)
        for name in [n for n in hf if ".attn_k." in n]:
            stored[name] = converter_permute(hf[name], 2)
    model = GGUFModel(write_gguf(arch, stored))
    assert model.config.tie_word_embeddings is False
    weights = dict(model.iter_weights())
    assert len(weights) == len(hf)
    assert torch.equal(
        weights["model.embed_tokens.weight"], torch.from_numpy(hf["token_embd.weight"])
    )
    assert torch.equal(weights["lm_head.weight"], torch.from_numpy(hf["output.weight"]))
    for gguf_name, hf_name in [
        ("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight"),
        ("blk.1.attn_q.bias", "model.layers.1.self_attn.q_proj.bias"),
        ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight"),
        ("blk.0.attn_k.bias", "model.layers.0.self_attn.k_proj.bias"),
        ("blk.0.attn_v.bias", "model.layers.0.self_attn.v_proj.bias"),
        ("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"),
        ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
        ("blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"),
        ("output_norm.weight", "model.norm.weight"),
    ]:
        assert torch.equal(weights[hf_name], torch.from_numpy(hf[gguf_name])), hf_name
    if arch == "llama":
        assert model.config.attention_bias


def test_qwen3_qk_norm_names(write_gguf, tiny_tensors):
    weights = dict(GGUFModel(write_gguf("qwen3", tiny_tensors("qwen3"))).iter_weights())
    assert weights["model.layers.1.self_attn.q_norm.weight"].shape == (16,)
    assert "model.layers.0.self_attn.k_norm.weight" in weights


def test_weights_stream_lazily(write_gguf, tiny_tensors):
    stream = GGUFModel(write_gguf("llama", tiny_tensors("llama"))).iter_weights()
    name, tensor = next(stream)
    assert name == "model.embed_tokens.weight" and tensor.shape == (32, 64)


def test_unsupported_tensor_type(write_gguf, tiny_tensors):
    tensors = tiny_tensors("llama")
    # IQ4_NL: 18 bytes per block of 32 values, so a [96, 64] weight is [96, 36] bytes.
    tensors["blk.1.ffn_up.weight"] = np.zeros((96, 36), dtype=np.uint8)
    path = write_gguf(
        "llama", tensors, raw_types={"blk.1.ffn_up.weight": GGMLQuantizationType.IQ4_NL}
    )
    model = GGUFModel(path)
    assert model.tensor_types()["blk.1.ffn_up.weight"] == "IQ4_NL"
    with pytest.raises(ValueError, match=r"'blk.1.ffn_up.weight' has unsupported type IQ4_NL"):
        model.iter_weights()


def test_unknown_tensor_name(write_gguf, tiny_tensors):
    tensors = tiny_tensors("llama") | {"blk.0.ssm_conv1d.weight": np.zeros((4, 8), np.float32)}
    with pytest.raises(
        ValueError, match="'blk.0.ssm_conv1d.weight' has no known Hugging Face name"
    ):
        GGUFModel(write_gguf("llama", tensors)).iter_weights()
