"""A random LoRA adapter of a model's shapes, written as PEFT writes one (no peft needed):
for device tests and benchmarks, where only the shapes and the files' layout matter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pagoda.lora.adapter import CONFIG_FILE, WEIGHTS_FILE, projection_shapes

PROJECTIONS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
               "mlp": ("gate_proj", "up_proj", "down_proj")}


def write_random_adapter(hf_config: Any, path: Path, *, rank: int, seed: int,
                         dtype: torch.dtype = torch.float32, b_scale: float = 0.01) -> Path:
    """An adapter of every attention and MLP projection of every layer (separate q/k/v
    and gate/up modules), rank `rank`, lora_alpha 2 x rank: A of unit-size outputs, B of
    `b_scale`, so that the model stays a model and its tokens still change."""
    shapes = projection_shapes(hf_config)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(hf_config.get_text_config().num_hidden_layers):
        for block, names in PROJECTIONS.items():
            for name in names:
                out, inp = shapes[name]
                key = f"base_model.model.model.layers.{layer}.{block}.{name}"
                tensors[f"{key}.lora_A.weight"] = (
                    torch.randn(rank, inp, generator=gen) * inp**-0.5).to(dtype)
                tensors[f"{key}.lora_B.weight"] = (
                    torch.randn(out, rank, generator=gen) * b_scale).to(dtype)
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file(tensors, path / WEIGHTS_FILE)
    (path / CONFIG_FILE).write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none",
        "target_modules": [n for names in PROJECTIONS.values() for n in names]}))
    return path
