"""A tiny random Llama checkpoint (config.json, safetensors, tokenizer) made on the spot.

Two layers, hidden size 64, grouped-query attention and a word-level tokenizer: small
enough to load in a moment, big enough to go through every part of the engine. Weights are
drawn with unit-scale activations so that greedy choices are clear-cut, not near-ties that
rounding could flip.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

VOCAB_SIZE = 256
BOS_ID, EOS_ID = 1, 2
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
HEAD_SIZE = HIDDEN // HEADS

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def _weight_shapes() -> dict[str, tuple[int, ...]]:
    """HF Llama parameter names and shapes for CONFIG."""
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (VOCAB_SIZE, HIDDEN),
        "model.norm.weight": (HIDDEN,),
        "lm_head.weight": (VOCAB_SIZE, HIDDEN),
    }
    for i in range(LAYERS):
        layer = f"model.layers.{i}"
        shapes |= {
            f"{layer}.input_layernorm.weight": (HIDDEN,),
            f"{layer}.post_attention_layernorm.weight": (HIDDEN,),
            f"{layer}.self_attn.q_proj.weight": (HEADS * HEAD_SIZE, HIDDEN),
            f"{layer}.self_attn.k_proj.weight": (KV_HEADS * HEAD_SIZE, HIDDEN),
            f"{layer}.self_attn.v_proj.weight": (KV_HEADS * HEAD_SIZE, HIDDEN),
            f"{layer}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_SIZE),
            f"{layer}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        }
    return shapes


def random_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 weights: norms near 1, matrices scaled by 1/sqrt(fan-in), embeddings unit."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in _weight_shapes().items():
        w = torch.randn(shape, generator=gen)
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * w
        elif "embed_tokens" not in name:
            w = w / shape[-1] ** 0.5
        weights[name] = w.contiguous()
    return weights


def save_word_tokenizer(path: Path) -> None:
    """Token i >= 3 is the word "w{i}"; 0, 1, 2 are <unk>, <s>, </s>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": BOS_ID, "</s>": EOS_ID}
    vocab |= {f"w{i}": i for i in range(3, VOCAB_SIZE)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(path))


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    """Write the checkpoint into directory `path` (created if missing); returns `path`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(CONFIG, indent=2))
    save_file(random_weights(seed), str(path / "model.safetensors"), metadata={"format": "pt"})
    save_word_tokenizer(path)
    return path
