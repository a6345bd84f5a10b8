"""GGUF metadata -> HF config: SmolLM2 against transformers' own GGUF reading, tiny files."""

from __future__ import annotations

import pytest
from gguf import RopeScalingType

from pagoda.gguf import GGUFModel


def test_smollm2_config_matches_transformers(smollm2, smollm2_path):
    from transformers import AutoConfig

    ours = smollm2.config
    theirs = AutoConfig.from_pretrained(smollm2_path.parent, gguf_file=smollm2_path.name)
    fields = (
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    )
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(theirs, f) for f in fields}
    assert ours.rms_norm_eps == pytest.approx(theirs.rms_norm_eps, rel=1e-6)
    assert ours.rope_parameters["rope_theta"] == theirs.rope_parameters["rope_theta"] == 1e5
    assert ours.rope_parameters["rope_type"] == "default"
    assert ours.architectures == ["LlamaForCausalLM"]
    # The facts we know independently (docs FACTS.md).
    assert (ours.num_hidden_layers, ours.hidden_size, ours.num_attention_heads) == (30, 576, 9)
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (1, 2, 2)
    assert ours.rms_norm_eps == 1e-5


def test_smollm2_describe(smollm2):
    model = smollm2
    types = model.tensor_types()
    assert types["token_embd.weight"] == "Q8_0"
    assert types["blk.0.attn_q.weight"] == "Q4_1"
    assert "LlamaForCausalLM" in model.describe() and "Q4_1 x210" in model.describe()


@pytest.mark.parametrize(
    "arch, hf_arch",
    [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"), ("qwen3", "Qwen3ForCausalLM")],
)
def test_tiny_configs(write_gguf, tiny_tensors, arch, hf_arch):
    path = write_gguf(arch, tiny_tensors(arch, tied=False, bias=arch == "qwen2"), file_type=0)
    config = GGUFModel(path).config
    assert config.architectures == [hf_arch]
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (32, 64, 96)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 16)
    assert config.num_hidden_layers == 2 and config.max_position_embeddings == 256
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 1e6}
    assert config.rms_norm_eps == 1e-6 and not config.tie_word_embeddings
    assert str(config.dtype).removeprefix("torch.") == "float32"


def test_yarn_rope_scaling(write_gguf, tiny_tensors):
    path = write_gguf(
        "qwen2",
        tiny_tensors("qwen2"),
        rope_scaling_type=RopeScalingType.YARN,
        rope_scaling_factor=4.0,
        rope_scaling_orig_ctx_len=64,
    )
    config = GGUFModel(path).config
    assert config.tie_word_embeddings
    assert config.rope_parameters == {
        "rope_type": "yarn",
        "rope_theta": 1e6,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
    }


def test_unsupported_architecture(write_gguf, tiny_tensors):
    path = write_gguf("mamba", tiny_tensors("llama"))
    with pytest.raises(
        ValueError, match=r"'mamba' is not supported; supported: llama, qwen2, qwen3"
    ):
        GGUFModel(path)
