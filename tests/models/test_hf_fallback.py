"""The transformers fallback matches HF transformers logits through the paged cache, for
architectures Pagoda has no class for, and refuses what it cannot serve, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    GPT2Config,
    GPTNeoXConfig,
    PretrainedConfig,
    PreTrainedModel,
    Starcoder2Config,
)

from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.models import load_model
from pagoda.models.hf_fallback import TransformersForCausalLM
from pagoda.ops import OpTable, use_ops
from tests.models.model_harness import (
    check_mixed_batch,
    check_prefill_then_decode,
    save_checkpoint,
)

ATOL = RTOL = 1e-4
VOCAB = 160
_SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=128)

CASES: dict[str, PretrainedConfig] = {
    # parallel residual, rotary on half of each head, separate output embedding
    "gpt-neox": GPTNeoXConfig(**_SIZES, rotary_pct=0.5, use_parallel_residual=True),
    # learned absolute positions, tied embeddings, Conv1D projections
    "gpt2": GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128),
    # grouped KV heads, a sliding window, biases
    "starcoder2-sliding": Starcoder2Config(**_SIZES, num_key_value_heads=2, sliding_window=5),
    # attention and final logit soft-capping, alternating sliding layers, query scaling
    "gemma2": Gemma2Config(**_SIZES, num_key_value_heads=2, head_dim=16, sliding_window=5,
                           attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                           query_pre_attn_scalar=32),
}


def random_hf_model(config: PretrainedConfig, seed: int = 0) -> PreTrainedModel:
    """An HF model with every parameter random and O(0.1) (norm scales around 1)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                             attn_implementation="eager")
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn_like(param) * 0.1
            is_scale = param.dim() == 1 and "norm" in name or ".ln_" in name
            param.copy_(1 + noise if is_scale and name.endswith("weight") else noise)
    return model.eval()


def load_fallback(path: Path | PretrainedConfig, **kwargs) -> torch.nn.Module:
    kwargs.setdefault("attn_backend", ReferenceAttentionBackend)
    with use_ops(OpTable.reference()):
        return load_model(path, dtype=torch.float32, device=torch.device("cpu"),
                          model_cls=TransformersForCausalLM, **kwargs)


@pytest.fixture(scope="module", params=list(CASES))
def checkpoint(request, tmp_path_factory) -> tuple[Path, PreTrainedModel]:
    hf_model = random_hf_model(CASES[request.param])
    return save_checkpoint(hf_model, tmp_path_factory.mktemp(request.param)), hf_model



def test_prefill_then_decode_matches_hf(checkpoint):
    path, hf_model = checkpoint
    model = load_fallback(path)
    assert isinstance(model, TransformersForCausalLM)
    check_prefill_then_decode(model, hf_model, atol=ATOL, rtol=RTOL, vocab=VOCAB)


def test_mixed_batch_matches_each_sequence_alone(checkpoint):
    path, hf_model = checkpoint
    check_mixed_batch(load_fallback(path), hf_model, atol=ATOL, rtol=RTOL, vocab=VOCAB)


def test_the_probe_finds_each_layers_attention():
    config = CASES["gemma2"]
    model = load_fallback(config, load_format="dummy")
    assert model.num_attention_layers == config.num_hidden_layers
    windows = [layer.impl.sliding_window for layer in model.attn_layers]
    assert windows == [5, None]  # Gemma 2 alternates sliding and full layers
    assert {layer.impl.logits_soft_cap for layer in model.attn_layers} == {2.0}
    assert {layer.impl.scale for layer in model.attn_layers} == {32**-0.5}
    spec = model.kv_cache_spec(16, torch.bfloat16)
    assert (spec.num_kv_heads, spec.head_size) == (2, 16)


_SMALL = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2)
REFUSED = {
    # model_type, config overrides, what the refusal says
    "bidirectional": ("bert", {}, "its attention is not causal"),
    "attends twice": ("diffllama", {}, "a layer calls attention more than once"),
    "value head size": ("deepseek_v3", dict(n_routed_experts=4, num_experts_per_tok=2,
                                            n_group=1, topk_group=1),
                        "its value heads differ in size"),
    "attention sinks": ("gpt_oss", dict(num_local_experts=4), "its attention takes 's_aux'"),
    "convolution layers": ("lfm2", dict(layer_types=["conv", "full_attention"]),
                           "its layer_types include 'conv'"),
    "unknown head": ("gpt_neox", dict(logit_scale=0.5), "its LM head computes more"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_fallback_cannot_serve_is_refused_at_load(case):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type, overrides, reason = REFUSED[case]
    config = CONFIG_MAPPING[model_type](**{**_SMALL, **overrides})
    with pytest.raises(ValueError, match=f"The transformers fallback cannot run .*{reason}"):
        load_fallback(config, load_format="dummy")


def _fallback_base(config: PretrainedConfig) -> torch.nn.Module:
    """transformers' base model for `config`, attending through the fallback's function."""
    from pagoda.models.hf_fallback import attention

    attention.register()
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation=attention.ATTN_IMPLEMENTATION
    ).eval().base_model


def test_token_mixing_outside_attention_is_detected():
    from transformers import Lfm2Config

    from pagoda.models.hf_fallback.probe import mixes_outside_attention

    def mixes(layer_types: list[str]) -> bool:
        base = _fallback_base(Lfm2Config(**{**_SMALL, "layer_types": layer_types}))
        with torch.no_grad():
            return mixes_outside_attention(base, 64, torch.device("cpu"), torch.float32)

    assert mixes(["conv", "full_attention"])
    assert not mixes(["full_attention", "full_attention"])


class _PositionsFromArange(torch.nn.Module):
    """A base model that numbers its tokens 0, 1, ... whatever position_ids say."""

    def __init__(self, base: torch.nn.Module):
        super().__init__()
        self.base = base

    def forward(self, input_ids, position_ids, use_cache):
        return self.base(input_ids=input_ids, use_cache=use_cache)


def test_positions_not_taken_from_position_ids_are_detected():
    from pagoda.models.hf_fallback.probe import packing_changes_hidden, probe_attention

    cpu = torch.device("cpu")

    def changes(base: torch.nn.Module) -> bool:
        with torch.no_grad():
            _, alone = probe_attention(base, VOCAB, cpu)
            return packing_changes_hidden(base, alone, VOCAB, cpu, torch.float32)

    base = _fallback_base(CASES["gpt2"])  # learned absolute positions
    assert not changes(base)
    assert changes(_PositionsFromArange(base))


def test_a_backend_without_what_the_layers_need_is_refused():
    """Gaudi's backend cannot soft-cap: a model whose calls ask for it is refused (the
    backend is only described here, never run)."""
    from pagoda_gaudi.attention import FusedSdpaAttentionBackend

    with pytest.raises(ValueError, match="Gemma2ForCausalLM's attention needs soft-capping "
                                         "of attention logits; attention backend 'fused_sdpa'"):
        load_fallback(CASES["gemma2"], load_format="dummy",
                      attn_backend=FusedSdpaAttentionBackend)
