"""Any registered causal LM as an embedding model: the decoder without its LM head, its
hidden states pooled (by default the last token's, normalized: how decoder embedders such
as Qwen3-Embedding are trained). It keeps the paged KV cache, chunked prefill and prefix
caching: with last-token pooling a prompt's output needs only its own last position.

The causal LM must hold its decoder as `model` and its head as `lm_head`, with weights
named as HF's (the Llama-style families); a checkpoint saved without the head (`Qwen3Model`)
names the decoder's weights without the "model." prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from pagoda.distributed import pp_group
from pagoda.models.pooler import PoolingModel
from pagoda.pooling import PoolerSpec

_BODY = "model."
_HEAD = "lm_head."


class DecoderEmbedding(PoolingModel):
    """Mixed in before a causal LM class (`as_pooling_model`)."""

    def __init__(self, config: Any, *, pooler_spec: PoolerSpec, **kwargs: Any):
        if pp_group().world_size > 1:
            raise ValueError("pipeline_parallel_size > 1 is not supported for pooling models")
        super().__init__(config, **kwargs)
        self.lm_head: nn.Module | None = None  # built by the causal LM, never used here
        self.pooler_spec = pooler_spec

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The decoder's weights, with or without the "model." prefix; an LM head in the
        checkpoint is skipped."""
        return super().load_weights(_decoder_weights(weights))  # type: ignore[misc]


def _decoder_weights(weights: Iterable[tuple[str, torch.Tensor]]
                     ) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in weights:
        if not name.startswith(_HEAD):
            yield (name if name.startswith(_BODY) else _BODY + name), tensor


@functools.cache
def as_pooling_model(causal_lm: type[nn.Module]) -> type[nn.Module]:
    """`causal_lm` as an embedding model class (one class per causal LM class)."""
    return type(f"{causal_lm.__name__}AsEmbedding", (DecoderEmbedding, causal_lm),
                {"__doc__": f"{causal_lm.__name__}'s decoder as an embedding model."})
