"""Build the model for a ModelSource: HF safetensors, GGUF, or dummy weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pagoda.attention import AttentionBackend
from pagoda.config import PoolerConfig
from pagoda.model_source import ModelSource
from pagoda.models.decoder_spec import attention_shape, attention_soft_cap
from pagoda.models.loader import ModelImpl, load_model, pooler_kwargs, resolve_model_class
from pagoda.models.pooler import pooler_spec_for
from pagoda.models.weights import process_weights_after_loading
from pagoda.pooling import PoolerSpec, read_sentence_transformers_config
from pagoda.quant import QuantMethod, UnquantizedMethod
from pagoda.quant.gguf import GGUFMethod

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
    runner: str = "auto",
    pooler_config: PoolerConfig | None = None,
    model_impl: ModelImpl = "auto",
) -> nn.Module:
    """The model on `device` with its weights (under the caller's `use_ops` table): the
    architecture's class as `runner` asks (see `resolve_model_class`), a pooling model with
    the `PoolerSpec` from `pooler_config` and the checkpoint's sentence-transformers files;
    `model_impl` picks Pagoda's class or the transformers fallback (`choose_model_impl`)."""
    checkpoint = (read_sentence_transformers_config(source.path)
                  if source.format == "hf" and runner != "generate" else None)
    model_cls = resolve_model_class(hf_config, runner,
                                    sentence_transformers=checkpoint is not None,
                                    model_impl=model_impl)
    pooler = pooler_spec_for(model_cls, pooler_config or PoolerConfig(), checkpoint, hf_config)
    quant_method = quant_method or UnquantizedMethod()
    weights_from = "dummy" if load_format == "dummy" else source.format
    if quant_method.checkpoint_format not in (None, weights_from):
        what = "dummy weights" if weights_from == "dummy" else f"{source.path} ({weights_from})"
        raise ValueError(
            f"quantization {quant_method.name!r} reads {quant_method.checkpoint_format} "
            f"checkpoints only, not {what}; use quantization 'none'"
        )
    common = {"dtype": dtype, "device": device, "attn_backend": attn_backend, "seed": seed,
              "quant_method": quant_method, "model_cls": model_cls, "pooler": pooler}
    if load_format == "dummy":
        return load_model(hf_config, load_format="dummy", **common)
    if source.format == "hf":
        if load_format == "gguf":
            raise ValueError(f"load_format='gguf' but {source.path} is an HF directory")
        return load_model(source.path, load_format=load_format, **common)
    if load_format not in ("auto", "gguf"):
        raise ValueError(f"load_format={load_format!r} cannot read the GGUF file {source.path}")
    return _load_gguf(source, hf_config, dtype=dtype, device=device, attn_backend=attn_backend,
                      quant_method=quant_method, model_cls=model_cls, pooler=pooler)


def _load_gguf(source: ModelSource, hf_config: Any, *, dtype: torch.dtype,
               device: torch.device, attn_backend: type[AttentionBackend],
               quant_method: QuantMethod, model_cls: type[nn.Module],
               pooler: PoolerSpec | None) -> nn.Module:
    with torch.device(device):
        module = model_cls(hf_config, dtype=dtype, attn_backend=attn_backend,
                           quant_method=quant_method, **pooler_kwargs(pooler))
    act_block = quant_method.act_block if isinstance(quant_method, GGUFMethod) else None
    module.load_weights(source.gguf.iter_weights(
        keep_quantized=quant_method.checkpoint_format == "gguf", act_block=act_block))
    source.release()
    process_weights_after_loading(module)
    return module.eval()
