"""GGUF tensor names -> Hugging Face checkpoint names (Llama / Qwen2 / Qwen3 layout)."""

from __future__ import annotations

_GLOBAL = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_PER_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str:
    """The HF name of a GGUF tensor.

    `blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; unknown names raise.
    """
    stem, _, kind = gguf_name.rpartition(".")
    parts = stem.split(".")
    if kind in ("weight", "bias"):
        if stem in _GLOBAL:
            return f"{_GLOBAL[stem]}.{kind}"
        if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _PER_LAYER:
            return f"model.layers.{parts[1]}.{_PER_LAYER[parts[2]]}.{kind}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no known Hugging Face name")
