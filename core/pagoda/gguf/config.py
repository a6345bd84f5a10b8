"""GGUF metadata -> Hugging Face model config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import LlamaFileType
from transformers import AutoConfig, PretrainedConfig

from pagoda.gguf import rope
from pagoda.gguf.fields import GGUFMetadata


@dataclass(frozen=True)
class ArchSpec:
    """How one GGUF architecture maps onto a Hugging Face model."""

    model_type: str
    hf_architecture: str
    # llama.cpp's converter interleaves the rows of q/k (weights and biases)
    # per head for its rotary kernel; loading must undo it.
    permuted_qk: bool


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": ArchSpec("llama", "LlamaForCausalLM", permuted_qk=True),
    "qwen2": ArchSpec("qwen2", "Qwen2ForCausalLM", permuted_qk=False),
    "qwen3": ArchSpec("qwen3", "Qwen3ForCausalLM", permuted_qk=False),
}

# A float file keeps its dtype. A quantized file's weights dequantize exactly into
# float32, and llama.cpp runs such models with float32 activations: so do we.
_FILE_DTYPES = {LlamaFileType.MOSTLY_F16: "float16", LlamaFileType.MOSTLY_BF16: "bfloat16"}


def arch_spec(architecture: str) -> ArchSpec:
    """The spec for a GGUF `general.architecture`, or a ValueError naming the supported ones."""
    spec = ARCHITECTURES.get(architecture)
    if spec is None:
        raise ValueError(
            f"GGUF architecture {architecture!r} is not supported; "
            f"supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    return spec


def build_config(
    meta: GGUFMetadata, spec: ArchSpec, shapes: Mapping[str, tuple[int, ...]],
    rope_freqs: np.ndarray | None = None,
) -> PretrainedConfig:
    """The HF config of the model in a GGUF file.

    `shapes` maps each GGUF tensor name to its shape in PyTorch order; the
    tensors decide the vocab size, tied embeddings and attention biases. `rope_freqs`
    is the file's `rope_freqs.weight` (Llama 3.1's RoPE scaling), if it has one.
    """
    hidden = int(meta.arch_get("embedding_length"))
    heads = int(meta.arch_get("attention.head_count"))
    kv_heads = meta.arch_get("attention.head_count_kv", heads)
    if not isinstance(kv_heads, int):
        raise ValueError(f"per-layer attention.head_count_kv ({kv_heads!r}) is not supported")
    head_dim = int(meta.arch_get("attention.key_length", hidden // heads))
    theta = float(meta.arch_get("rope.freq_base", 10000.0))
    scaling = _rope_scaling(meta)
    if rope_freqs is not None:
        if scaling:
            raise ValueError(f"GGUF tensor {rope.TENSOR!r} and rope.scaling.type "
                             f"{scaling['rope_type']!r} both scale RoPE: only one may")
        scaling = rope.rope_scaling_from_factors(rope_freqs, theta, head_dim)
    rope_parameters = {"rope_type": "default", "rope_theta": theta, **scaling}
    kwargs: dict[str, Any] = dict(
        architectures=[spec.hf_architecture],
        vocab_size=shapes["token_embd.weight"][0],
        hidden_size=hidden,
        intermediate_size=int(meta.arch_get("feed_forward_length")),
        num_hidden_layers=int(meta.arch_get("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=int(meta.arch_get("context_length")),
        rms_norm_eps=float(meta.arch_get("attention.layer_norm_rms_epsilon")),
        rope_parameters=rope_parameters,
        tie_word_embeddings="output.weight" not in shapes,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta.get("tokenizer.ggml.padding_token_id"),
        dtype=_FILE_DTYPES.get(meta.get("general.file_type"), "float32"),
    )
    if spec.model_type == "llama":
        kwargs["attention_bias"] = "blk.0.attn_q.bias" in shapes
        kwargs["mlp_bias"] = "blk.0.ffn_up.bias" in shapes
    else:
        kwargs["use_sliding_window"] = False
    return AutoConfig.for_model(spec.model_type, **kwargs)


def _rope_scaling(meta: GGUFMetadata) -> dict[str, Any]:
    """HF rope parameters for the file's `rope.scaling.*` keys (empty when unscaled)."""
    kind = meta.arch_get("rope.scaling.type", "none")
    if kind == "none":
        return {}
    if kind not in ("linear", "yarn"):
        raise ValueError(
            f"GGUF rope scaling type {kind!r} is not supported; supported: linear, yarn"
        )
    scaling: dict[str, Any] = {
        "rope_type": kind,
        "factor": float(meta.arch_get("rope.scaling.factor")),
    }
    if kind == "yarn":
        optional = {
            "original_max_position_embeddings": "rope.scaling.original_context_length",
            "attention_factor": "rope.scaling.attn_factor",
            "beta_fast": "rope.scaling.yarn_beta_fast",
            "beta_slow": "rope.scaling.yarn_beta_slow",
        }
        for hf_key, gguf_key in optional.items():
            value = meta.arch_get(gguf_key, None)
            if value is not None:
                scaling[hf_key] = value
    return scaling
