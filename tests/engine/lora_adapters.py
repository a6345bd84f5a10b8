"""PEFT LoRA adapters of the tiny test models, made with the `peft` library, and HF
transformers' greedy tokens with one applied (the reference)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


def make_adapter(base: Path, path: Path, *, rank: int, alpha: float, targets: list[str] | str,
                 seed: int, rslora: bool = False) -> Path:
    """A random adapter of `base` (A and B both random: PEFT's default B is zero, which
    would change nothing) saved as PEFT saves one."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, use_rslora=rslora,
                        init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():  # deltas of the base weights' size, so that tokens change
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.3 / rank**0.5)
    peft_model.save_pretrained(path)
    return path


def peft_greedy(base: Path, adapter: Path | None, prompts: list[list[int]],
                max_new_tokens: int) -> list[list[int]]:
    """HF transformers' greedy continuation of each prompt with the PEFT adapter applied
    (None: the base model), one prompt at a time, eos ignored."""
    from peft import PeftModel

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    outputs = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            outputs.append(out[0, len(prompt):].tolist())
    return outputs


def fused_qkv_adapter(adapter: Path, path: Path) -> Path:
    """A copy of an adapter of q_proj whose weights claim a fused qkv_proj (shapes right
    for the model, a module name that a model with separate q/k/v projections lacks)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(adapter, path)
    tensors = load_file(path / "adapter_model.safetensors")
    fused = {}
    for key, value in tensors.items():
        if ".q_proj.lora_A" in key:
            fused[key.replace("q_proj", "qkv_proj")] = value
        elif ".q_proj.lora_B" in key:
            fused[key.replace("q_proj", "qkv_proj")] = torch.cat([value, value[: value.shape[0] // 2],
                                                                  value[: value.shape[0] // 2]])
    save_file(fused, path / "adapter_model.safetensors")
    return path
