"""Tiny random mixture-of-experts checkpoints (Mixtral, Qwen2-MoE, Qwen3-MoE), made in the
test run. Every weight is random at 0.1 (norms 1 +- 0.1), so routers choose experts
decisively rather than by near-ties."""

from __future__ import annotations

from pathlib import Path

from transformers import MixtralConfig, PretrainedConfig, Qwen2MoeConfig, Qwen3MoeConfig

from tests.engine.tiny_models import VOCAB, save_tokenizer
from tests.models.model_harness import random_hf_model

_COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
)
_QWEN = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)


def tiny_moe_configs() -> dict[str, PretrainedConfig]:
    """Mixtral (every layer sparse), Qwen2-MoE (a shared expert, a dense middle layer, top-k
    weights as the softmax gives them) and Qwen3-MoE (q/k norm, top-k rescaled to one)."""
    return {
        "mixtral": MixtralConfig(**_COMMON, num_local_experts=8, num_experts_per_tok=2),
        "qwen2_moe": Qwen2MoeConfig(**{**_COMMON, "num_hidden_layers": 3}, **_QWEN,
                                    shared_expert_intermediate_size=48, mlp_only_layers=[1],
                                    norm_topk_prob=False),
        "qwen3_moe": Qwen3MoeConfig(**_COMMON, **_QWEN, head_dim=32, norm_topk_prob=True),
    }


def make_moe_checkpoint(path: Path, config: PretrainedConfig, seed: int = 0) -> Path:
    """Save a random float32 model of `config` (with a tokenizer) to `path`."""
    random_hf_model(config, seed).save_pretrained(path)
    save_tokenizer(path)
    return path
