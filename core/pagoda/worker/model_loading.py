"""Build the model for a ModelSource: HF safetensors, GGUF, or dummy weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pagoda.attention import AttentionBackend
from pagoda.model_source import ModelSource
from pagoda.models.decoder_spec import attention_shape, attention_soft_cap
from pagoda.models.loader import load_model, resolve_model_class
from pagoda.models.weights import process_weights_after_loading
from pagoda.quant import QuantMethod, UnquantizedMethod

__all__ = ["attention_shape", "attention_soft_cap", "build_model"]


def build_model(
    source: ModelSource,
    hf_config: Any,
    *,
    dtype: torch.dtype,
    device: torch.device,
    attn_backend: type[AttentionBackend],
    load_format: str = "auto",
    seed: int = 0,
    quant_method: QuantMethod | None = None,
) -> nn.Module:
    """The model on `device` with its weights (under the caller's `use_ops` table)."""
    quant_method = quant_method or UnquantizedMethod()
    weights_from = "dummy" if load_format == "dummy" else source.format
    if quant_method.checkpoint_format not in (None, weights_from):
        what = "dummy weights" if weights_from == "dummy" else f"{source.path} ({weights_from})"
        raise ValueError(
            f"quantization {quant_method.name!r} reads {quant_method.checkpoint_format} "
            f"checkpoints only, not {what}; use quantization 'none'"
        )
    common = {"dtype": dtype, "device": device, "attn_backend": attn_backend, "seed": seed,
              "quant_method": quant_method}
    if load_format == "dummy":
        return load_model(hf_config, load_format="dummy", **common)
    if source.format == "hf":
        if load_format == "gguf":
            raise ValueError(f"load_format='gguf' but {source.path} is an HF directory")
        return load_model(source.path, load_format=load_format, **common)
    if load_format not in ("auto", "gguf"):
        raise ValueError(f"load_format={load_format!r} cannot read the GGUF file {source.path}")
    return _load_gguf(source, hf_config, dtype=dtype, device=device, attn_backend=attn_backend,
                      quant_method=quant_method)


def _load_gguf(source: ModelSource, hf_config: Any, *, dtype: torch.dtype,
               device: torch.device, attn_backend: type[AttentionBackend],
               quant_method: QuantMethod) -> nn.Module:
    model_cls = resolve_model_class(hf_config)
    with torch.device(device):
        module = model_cls(hf_config, dtype=dtype, attn_backend=attn_backend,
                           quant_method=quant_method)
    module.load_weights(source.gguf.iter_weights(keep_quantized=quant_method.checkpoint_format == "gguf"))
    process_weights_after_loading(module)
    return module.eval()
