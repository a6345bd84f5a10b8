"""Loading: architecture resolution, dummy weights, and clear errors for bad checkpoints."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.models import iterate_safetensors, load_hf_config, load_model
from pagoda.models.decoder_spec import attention_shape
from pagoda.models.llama import LlamaForCausalLM
from tests.models.model_harness import PagedBatch, random_hf_model, save_checkpoint, tiny_config

CPU = torch.device("cpu")


def _load(model, **kwargs):
    return load_model(
        model, dtype=torch.float32, device=CPU, attn_backend=ReferenceAttentionBackend, **kwargs
    )


def _llama_config(**overrides) -> LlamaConfig:
    return tiny_config(LlamaConfig, **{"architectures": ["LlamaForCausalLM"], **overrides})


def test_dummy_weights_are_deterministic_and_give_varied_logits():
    config = _llama_config()
    model = _load(config, load_format="dummy", seed=3)
    again = _load(config, load_format="dummy", seed=3)
    other = _load(config, load_format="dummy", seed=4)
    weight = model.model.layers[0].self_attn.qkv_proj.weight
    assert torch.equal(weight, again.model.layers[0].self_attn.qkv_proj.weight)
    assert not torch.equal(weight, other.model.layers[0].self_attn.qkv_proj.weight)
    (logits,) = PagedBatch(model).step([(0, list(range(1, 17)))])
    assert torch.isfinite(logits).all()
    assert logits.std() > 0.1
    assert len(set(logits.argmax(-1).tolist())) > 1


def test_unsupported_architecture_lists_supported_ones():
    config = _llama_config(architectures=["FooForCausalLM"])
    with pytest.raises(ValueError, match=r"FooForCausalLM.*supported:.*LlamaForCausalLM"):
        _load(config, load_format="dummy")


def test_config_alone_needs_dummy_format():
    with pytest.raises(ValueError, match="load_format='dummy'"):
        _load(_llama_config())


def test_directory_without_weights_is_an_error(tmp_path):
    _llama_config().save_pretrained(tmp_path)
    assert load_hf_config(tmp_path).architectures == ["LlamaForCausalLM"]
    with pytest.raises(FileNotFoundError, match="No safetensors weights"):
        _load(tmp_path)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    hf_model = random_hf_model(_llama_config())
    return save_checkpoint(hf_model, tmp_path_factory.mktemp("llama"))


def _empty_model(path) -> LlamaForCausalLM:
    return LlamaForCausalLM(
        load_hf_config(path), dtype=torch.float32, attn_backend=ReferenceAttentionBackend
    )


def test_load_weights_reports_loaded_parameters(llama_dir):
    model = _empty_model(llama_dir)
    loaded = model.load_weights(iterate_safetensors(llama_dir))
    assert loaded == {name for name, _ in model.named_parameters()}


def test_missing_weight_is_named(llama_dir):
    model = _empty_model(llama_dir)
    weights = (w for w in iterate_safetensors(llama_dir) if "layers.1.self_attn.k_proj" not in w[0])
    with pytest.raises(ValueError, match=r"Missing weights.*layers\.1\.self_attn\.k_proj\.weight"):
        model.load_weights(weights)


def test_unexpected_weight_is_named(llama_dir):
    model = _empty_model(llama_dir)
    extra = [("model.layers.0.self_attn.foo.weight", torch.zeros(2))]
    with pytest.raises(ValueError, match=r"Unexpected weight 'model\.layers\.0\.self_attn\.foo"):
        model.load_weights([*iterate_safetensors(llama_dir), *extra])


def test_wrong_shape_is_named(llama_dir):
    model = _empty_model(llama_dir)
    bad = [("model.layers.0.mlp.up_proj.weight", torch.zeros(3, 3))]
    with pytest.raises(ValueError, match=r"'model\.layers\.0\.mlp\.up_proj\.weight' has shape"):
        model.load_weights(bad)


def test_rotary_buffers_in_checkpoint_are_skipped(llama_dir):
    model = _empty_model(llama_dir)
    inv_freq = [("model.layers.0.self_attn.rotary_emb.inv_freq", torch.zeros(8))]
    model.load_weights([*iterate_safetensors(llama_dir), *inv_freq])


@pytest.mark.parametrize(
    ("cls", "overrides", "expected"),
    [
        (LlamaConfig, {}, (4, 2, 16, None)),
        (MistralConfig, {"sliding_window": 7, "head_dim": 32}, (4, 2, 32, 7)),
        (Qwen2Config, {"use_sliding_window": False}, (4, 2, 16, None)),
        (Qwen2Config, {"use_sliding_window": True, "sliding_window": 9, "max_window_layers": 1},
         (4, 2, 16, 9)),
        (Qwen3Config, {"head_dim": 24}, (4, 2, 24, None)),
    ],
)
def test_attention_shape_and_kv_cache_spec(cls, overrides, expected):
    config = tiny_config(cls, **overrides)
    assert attention_shape(config) == LlamaForCausalLM.attention_shape(config) == expected
    model = LlamaForCausalLM(config, dtype=torch.float32, attn_backend=ReferenceAttentionBackend)
    spec = model.kv_cache_spec(16, torch.bfloat16)
    assert (spec.block_size, spec.num_kv_heads, spec.head_size, spec.dtype) == (
        16, expected[1], expected[2], torch.bfloat16
    )
    assert model.num_attention_layers == config.num_hidden_layers


def test_model_impl_picks_native_else_the_transformers_fallback():
    from transformers import GPTNeoXConfig

    from pagoda.models.loader import FALLBACK_CLASS, choose_model_impl

    llama, neox = _llama_config(), GPTNeoXConfig(architectures=["GPTNeoXForCausalLM"])
    native = choose_model_impl(llama)
    assert (native.impl, native.target) == ("pagoda", "pagoda.models.llama:LlamaForCausalLM")
    assert native.describe() == "native: pagoda.models.llama:LlamaForCausalLM"
    forced = choose_model_impl(llama, "transformers")
    assert (forced.impl, forced.architecture, forced.target) == (
        "transformers", "LlamaForCausalLM", FALLBACK_CLASS)
    fallback = choose_model_impl(neox)
    assert fallback.describe() == ("transformers fallback: transformers.GPTNeoXForCausalLM "
                                   f"through {FALLBACK_CLASS}")
    with pytest.raises(ValueError, match="GPTNeoXForCausalLM with model_impl='pagoda': Pagoda "
                                         "has no class for it"):
        choose_model_impl(neox, "pagoda")


def test_a_config_without_architectures_takes_its_model_types_causal_lm():
    from transformers import GPTNeoXConfig

    from pagoda.models.loader import choose_model_impl

    assert choose_model_impl(GPTNeoXConfig()).architecture == "GPTNeoXForCausalLM"
    assert choose_model_impl(tiny_config(LlamaConfig)).target.endswith(":LlamaForCausalLM")


@pytest.mark.parametrize(("architecture", "why"), [
    ("GPTNeoForCausalLM", "GPTNeoForCausalLM does not support the attention interface"),
    ("GPTNeoXForSequenceClassification", "is not one of transformers' causal LMs"),
    ("FooForCausalLM", "has no model class FooForCausalLM"),
])
def test_what_neither_can_run_is_refused_naming_why(architecture, why):
    from transformers import PretrainedConfig

    from pagoda.models.loader import choose_model_impl

    config = PretrainedConfig(architectures=[architecture])
    with pytest.raises(ValueError, match=f"Unsupported model architecture {architecture}: "
                                         f"Pagoda has no class for it .*, and the transformers "
                                         f"fallback cannot run it: .*{why}"):
        choose_model_impl(config)
    with pytest.raises(ValueError, match=f"The transformers fallback cannot run "
                                         f"{architecture}: .*{why}"):
        choose_model_impl(config, "transformers")
