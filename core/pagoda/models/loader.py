"""Build a model from an HF config and fill it with checkpoint or dummy weights."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig

from pagoda.attention import AttentionBackend
from pagoda.models.hf_fallback.support import (
    FallbackUnsupported,
    config_architectures,
    fallback_class,
)
from pagoda.models.pooler import model_runner
from pagoda.models.pooling_adapter import as_pooling_model
from pagoda.models.weights import (
    fill_dummy_weights,
    iterate_safetensors,
    process_weights_after_loading,
    safetensors_files,
)
from pagoda.plugins import get_registries, load_target
from pagoda.pooling import PoolerSpec
from pagoda.quant import QuantMethod

LoadFormat = Literal["auto", "safetensors", "dummy"]


def load_hf_config(path: str | os.PathLike[str]) -> PretrainedConfig:
    """The HF config (config.json) of a local model directory."""
    return AutoConfig.from_pretrained(str(path))


ModelImpl = Literal["auto", "pagoda", "transformers"]

FALLBACK_CLASS = "pagoda.models.hf_fallback:TransformersForCausalLM"


@dataclass(frozen=True)
class ModelChoice:
    """Which class runs a model: Pagoda's own for the architecture, or the transformers
    fallback."""

    architecture: str
    impl: Literal["pagoda", "transformers"]
    target: str
    """The class, as "module:attribute"."""

    def describe(self) -> str:
        """E.g. "native: pagoda.models.llama:LlamaForCausalLM"."""
        if self.impl == "pagoda":
            return f"native: {self.target}"
        return f"transformers fallback: transformers.{self.architecture} through {self.target}"


def choose_model_impl(config: PretrainedConfig, model_impl: ModelImpl = "auto") -> ModelChoice:
    """The class for the config's `architectures` (a config without them: the causal LM
    transformers builds for its `model_type`).

    auto: Pagoda's own where registered, else the transformers fallback where transformers
    has the architecture as a causal LM with attention-interface support; pagoda and
    transformers force one. ValueError naming the architecture and why nothing runs it.
    """
    if model_impl not in ("auto", "pagoda", "transformers"):
        raise ValueError(f"model_impl must be auto, pagoda or transformers, got {model_impl!r}")
    models = get_registries().models
    architectures = config_architectures(config)
    named = ", ".join(architectures) or "(none in config)"
    if model_impl != "transformers":
        for arch in architectures:
            if arch in models:
                return ModelChoice(arch, "pagoda", models.get(arch).spec.model)
    native = f"Pagoda has no class for it (supported: {', '.join(models.names())})"
    if model_impl == "pagoda":
        raise ValueError(f"Unsupported model architecture {named} with model_impl='pagoda': "
                         f"{native}")
    try:
        arch, _ = fallback_class(config)
    except FallbackUnsupported as exc:
        if model_impl == "transformers":
            raise ValueError(f"The transformers fallback cannot run {named}: {exc}") from None
        raise ValueError(f"Unsupported model architecture {named}: {native}, and the "
                         f"transformers fallback cannot run it: {exc}") from None
    return ModelChoice(arch, "transformers", FALLBACK_CLASS)


def resolve_model_class(config: PretrainedConfig, runner: str = "auto", *,
                        sentence_transformers: bool = False,
                        model_impl: ModelImpl = "auto") -> type[nn.Module]:
    """The class `choose_model_impl` picks for the config, as `runner` asks.

    runner "auto" takes what the architecture is (its registration's `runner`, else the
    class's own), except that a causal LM with a `sentence_transformers` config pools;
    "pooling" turns a causal LM into an embedding model; a pooling model cannot generate.
    The transformers fallback only generates.
    """
    choice = choose_model_impl(config, model_impl)
    model_cls = load_target(choice.target)
    if choice.impl == "transformers":
        if runner == "pooling" or (runner == "auto" and sentence_transformers):
            raise ValueError(f"The transformers fallback ({choice.architecture}) only "
                             "generates: runner 'pooling' (or a sentence-transformers "
                             "checkpoint with runner 'auto') needs a Pagoda model class; "
                             "use runner 'generate'")
        return model_cls
    spec = get_registries().models.get(choice.architecture).spec
    own = model_runner(model_cls)
    if runner == "auto":
        runner = spec.runner or ("pooling" if sentence_transformers else own)
    if runner == "generate" and "pooling" in (own, spec.runner):
        raise ValueError(f"runner 'generate': {choice.architecture} is a pooling model "
                         "(embeddings or scores, no LM head); it cannot generate text")
    return as_pooling_model(model_cls) if runner != own else model_cls


def load_model(
    model: str | os.PathLike[str] | PretrainedConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    attn_backend: type[AttentionBackend],
    load_format: LoadFormat = "auto",
    seed: int = 0,
    quant_method: QuantMethod | None = None,
    model_cls: type[nn.Module] | None = None,
    pooler: PoolerSpec | None = None,
) -> nn.Module:
    """Build the model on `device` (under the caller's `use_ops` table) and load its weights.

    `model` is a local HF model directory, or a config for dummy weights. "auto" reads the
    directory's safetensors; "dummy" fills deterministic random weights from `seed`.
    `model_cls`: the class to build (None: the config's, `resolve_model_class`), with
    `pooler` if it is a pooling model.
    """
    if isinstance(model, PretrainedConfig):
        config, model_dir = model, None
    else:
        model_dir = Path(model)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir} is not a local model directory")
        config = load_hf_config(model_dir)
    weights = None if load_format == "dummy" else _checkpoint_weights(model_dir, load_format)

    model_cls = model_cls or resolve_model_class(config)
    with torch.device(device):
        module = model_cls(config, dtype=dtype, attn_backend=attn_backend,
                           quant_method=quant_method, **pooler_kwargs(pooler))
    if weights is None:
        fill_dummy_weights(module, seed)
    else:
        module.load_weights(weights)
    process_weights_after_loading(module)
    return module.eval()


def pooler_kwargs(pooler: PoolerSpec | None) -> dict[str, PoolerSpec]:
    """The constructor keyword a pooling model class takes (nothing for a generating one)."""
    return {} if pooler is None else {"pooler_spec": pooler}


def _checkpoint_weights(
    model_dir: Path | None, load_format: str
) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's weights for `load_format`, checked before the model is built."""
    if load_format not in ("auto", "safetensors"):
        raise ValueError(f"Unknown load_format {load_format!r} (auto, safetensors, dummy)")
    if model_dir is None:
        raise ValueError("Loading from a config alone needs load_format='dummy'")
    if not safetensors_files(model_dir):
        raise FileNotFoundError(
            f"No safetensors weights in {model_dir} (use load_format='dummy' for random ones)"
        )
    return iterate_safetensors(model_dir)
