"""HF transformers' attention calls, answered by Pagoda's paged attention.

transformers looks an attention function up by the name in `config._attn_implementation`
(its `AttentionInterface`) and calls it with the layer's module and its query, key and
value [batch, heads, tokens, head size]. We register one function under
`ATTN_IMPLEMENTATION`; each HF attention module carries a binding (a plain attribute,
not a submodule, so it is no part of the HF state dict) that says which Pagoda
`Attention` layer and KV cache answer its calls. The step's caches and metadata reach
the bindings through one shared `StepContext`, set before each forward.

A module without a binding is only called while `calls_answered_by` is active: the
fallback's checks at load run the model that way, before any binding exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pagoda.attention import AttentionMetadata
from pagoda.models.layers import Attention

ATTN_IMPLEMENTATION = "pagoda"
"""The name our attention function is registered under in transformers."""

BINDING = "_pagoda_attention"
"""The attribute of an HF attention module that holds its `LayerBinding`."""

AttentionFn = Callable[..., torch.Tensor]
"""fn(module, query, key, value, **kwargs) -> output [1, tokens, heads, head size]."""

_ANSWER: ContextVar[AttentionFn | None] = ContextVar("pagoda_hf_attention", default=None)


@dataclass
class StepContext:
    """The KV caches and attention metadata of the step being run."""

    kv_caches: list[torch.Tensor] | None = None
    metadata: AttentionMetadata | None = None


@dataclass(frozen=True)
class LayerBinding:
    """One HF attention module's Pagoda attention layer and the index of its KV cache."""

    attn: Attention
    cache_index: int
    step: StepContext

    def __call__(self, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                 value: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        kv_caches, metadata = self.step.kv_caches, self.step.metadata
        assert kv_caches is not None and metadata is not None, "forward sets the step first"
        out = self.attn(_tokens_first(query), _tokens_first(key), _tokens_first(value),
                        kv_caches[self.cache_index], metadata)
        return out.view(1, query.shape[2], query.shape[1], -1)


def _tokens_first(x: torch.Tensor) -> torch.Tensor:
    """[1, heads, tokens, size] -> [tokens, heads, size]."""
    return x[0].transpose(0, 1).contiguous()


def bind(module: nn.Module, binding: LayerBinding) -> None:
    """Route `module`'s attention calls to `binding`."""
    object.__setattr__(module, BINDING, binding)


@contextmanager
def calls_answered_by(fn: AttentionFn) -> Iterator[None]:
    """Within the block, unbound modules' attention calls go to `fn`."""
    token = _ANSWER.set(fn)
    try:
        yield
    finally:
        _ANSWER.reset(token)


def pagoda_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: Any = None,
                             **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The function transformers calls (its attention interface's signature). The mask is
    None where transformers builds it (no mask function is registered under our name):
    Pagoda's metadata says which tokens each one sees."""
    answer = module.__dict__.get(BINDING) or _ANSWER.get()
    if answer is None:
        raise RuntimeError(f"{type(module).__name__} (layer {getattr(module, 'layer_idx', '?')})"
                           " has no Pagoda attention layer bound to it")
    return answer(module, query, key, value, attention_mask=attention_mask, **kwargs), None


def register() -> None:
    """Register `pagoda_attention_forward` with transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, pagoda_attention_forward)
